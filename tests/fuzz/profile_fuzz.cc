// Fuzzes sched::ParseProfileJson, which reads profile files (overlap-sim, the planners). A profile
// that parses must print as JSON that parses again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "scheduler/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<overlap::sched::Profile> profile = overlap::sched::ParseProfileJson(text, "fuzz");
  if (!profile.ok()) return 0;
  const std::string json = profile->ToJson();
  absl::StatusOr<overlap::sched::Profile> again = overlap::sched::ParseProfileJson(json, "again");
  if (!again.ok() || again->ToJson() != json) std::abort();
  return 0;
}
