#include "compression/params.h"

#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap {
namespace compress {

ParamReader::ParamReader(const CompressorConfig& config) : config_(config) {
  canonical_.name = config.name;
}

bool ParamReader::Has(absl::string_view key) const {
  return config_.params.count(std::string(key)) > 0;
}

std::optional<std::string> ParamReader::Raw(absl::string_view key) const {
  auto it = config_.params.find(std::string(key));
  if (it == config_.params.end()) return std::nullopt;
  return it->second;
}

absl::Status ParamReader::KOrRatio(int64_t k_max, int64_t* k, double* ratio) {
  if (Has("k") && Has("ratio")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compressor '", config_.name, "': give either parameter 'k' or 'ratio', not both"));
  }
  *k = 0;
  *ratio = 0.0;
  if (Has("k")) {
    absl::StatusOr<int64_t> v = Int("k", 0, 1, k_max);
    if (!v.ok()) return v.status();
    *k = *v;
    return absl::OkStatus();
  }
  absl::StatusOr<double> v = Double("ratio", 0.01, 1e-9, 1.0);
  if (!v.ok()) return v.status();
  *ratio = *v;
  return absl::OkStatus();
}

std::string ParamReader::Where(absl::string_view key) const {
  return absl::StrCat("compressor '", config_.name, "': parameter '", key, "'");
}

absl::StatusOr<double> ParamReader::Double(absl::string_view key, double default_value, double lo,
                                           double hi) {
  known_.insert(std::string(key));
  double value = default_value;
  auto it = config_.params.find(std::string(key));
  if (it != config_.params.end() &&
      (!absl::SimpleAtod(it->second, &value) || !std::isfinite(value))) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(key), " = '", it->second, "' is not a number"));
  }
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(key), " = ", value, " is out of range [", lo, ", ", hi, "]"));
  }
  canonical_.params[std::string(key)] = absl::StrCat(value);
  return value;
}

absl::StatusOr<int64_t> ParamReader::Int(absl::string_view key, int64_t default_value, int64_t lo,
                                         int64_t hi) {
  known_.insert(std::string(key));
  int64_t value = default_value;
  auto it = config_.params.find(std::string(key));
  if (it != config_.params.end() && !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(key), " = '", it->second, "' is not an integer"));
  }
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(key), " = ", value, " is out of range [", lo, ", ", hi, "]"));
  }
  canonical_.params[std::string(key)] = absl::StrCat(value);
  return value;
}

absl::StatusOr<std::string> ParamReader::Choice(absl::string_view key,
                                                absl::string_view default_value,
                                                std::initializer_list<absl::string_view> allowed) {
  known_.insert(std::string(key));
  std::string value(default_value);
  auto it = config_.params.find(std::string(key));
  if (it != config_.params.end()) value = it->second;
  for (absl::string_view a : allowed) {
    if (a == value) {
      canonical_.params[std::string(key)] = value;
      return value;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Where(key), " = '", value, "' must be one of: ", absl::StrJoin(allowed, ", ")));
}

void ParamReader::SetCanonical(absl::string_view key, std::string value) {
  known_.insert(std::string(key));
  canonical_.params[std::string(key)] = std::move(value);
}

absl::Status ParamReader::Finish() const {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : config_.params) {
    if (known_.count(key) == 0) unknown.push_back(key);
  }
  if (unknown.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "compressor '", config_.name, "': unknown parameter(s) ", absl::StrJoin(unknown, ", "),
      "; accepted: ", known_.empty() ? "none" : absl::StrJoin(known_, ", ")));
}

}  // namespace compress
}  // namespace overlap
