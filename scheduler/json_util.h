// Small helpers that read typed fields out of nlohmann::json values and turn every problem into
// an InvalidArgument naming the source, the JSON path and the cause. Internal to scheduler/.
#ifndef OVERLAP_SCHEDULER_JSON_UTIL_H_
#define OVERLAP_SCHEDULER_JSON_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace overlap::sched {

// "line L column C: <parser message>" for the first syntax error in `text`.
std::string JsonErrorLocation(absl::string_view text);

class JsonReader {
 public:
  // `source` is a file name or "<string>"; `path` the JSON path of the object being read.
  explicit JsonReader(absl::string_view source, absl::string_view path = "")
      : source_(source), path_(path) {}

  absl::Status Error(absl::string_view field, absl::string_view cause) const;

  // Each returns InvalidArgument when `key` is missing or has the wrong type.
  absl::StatusOr<std::string> String(const nlohmann::json& obj, const char* key) const;
  absl::StatusOr<double> Number(const nlohmann::json& obj, const char* key) const;
  absl::StatusOr<int64_t> Integer(const nlohmann::json& obj, const char* key) const;
  absl::StatusOr<const nlohmann::json*> Array(const nlohmann::json& obj, const char* key) const;

 private:
  std::string source_;
  std::string path_;
};

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_JSON_UTIL_H_
