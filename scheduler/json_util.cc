#include "scheduler/json_util.h"

#include "absl/strings/str_cat.h"

namespace overlap::sched {

using nlohmann::json;

std::string JsonErrorLocation(absl::string_view text) {
  try {
    json ignored = json::parse(text.begin(), text.end());
    (void)ignored;
  } catch (const json::parse_error& e) {
    // Translate the byte offset into a line and column people can find.
    size_t line = 1, column = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string what = e.what();
    const size_t colon = what.rfind(": ");
    if (colon != std::string::npos) {
      what = what.substr(colon + 2);
    }
    return absl::StrCat("line ", line, " column ", column, ": ", what);
  } catch (const json::exception& e) {
    // Not a syntax error, e.g. out_of_range for a number beyond double ("1e400"), which has no
    // byte offset; it must not escape to the caller, which only asked where the error is.
    std::string what = e.what();
    const size_t bracket = what.find("] ");
    return bracket == std::string::npos ? what : what.substr(bracket + 2);
  }
  return "unknown syntax error";
}

absl::Status JsonReader::Error(absl::string_view field, absl::string_view cause) const {
  std::string where = path_;
  if (!field.empty()) {
    where = where.empty() ? std::string(field) : absl::StrCat(where, ".", field);
  }
  if (where.empty()) {
    where = "(top level)";
  }
  return absl::InvalidArgumentError(absl::StrCat(source_, ": ", where, ": ", cause));
}

absl::StatusOr<std::string> JsonReader::String(const json& obj, const char* key) const {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return Error(key, "missing");
  }
  if (!it->is_string()) {
    return Error(key, "must be a string");
  }
  return it->get<std::string>();
}

absl::StatusOr<double> JsonReader::Number(const json& obj, const char* key) const {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return Error(key, "missing");
  }
  if (!it->is_number()) {
    return Error(key, "must be a number");
  }
  return it->get<double>();
}

absl::StatusOr<int64_t> JsonReader::Integer(const json& obj, const char* key) const {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return Error(key, "missing");
  }
  if (!it->is_number_integer()) {
    return Error(key, "must be an integer");
  }
  return it->get<int64_t>();
}

absl::StatusOr<const json*> JsonReader::Array(const json& obj, const char* key) const {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return Error(key, "missing");
  }
  if (!it->is_array()) {
    return Error(key, "must be an array");
  }
  return &*it;
}

}  // namespace overlap::sched
