// Launcher options that configure the overlap runtime in every rank. Each becomes one OVERLAP_*
// environment variable (runtime/config.h reads them); the table is the single place to add one.
#ifndef OVERLAP_LAUNCHER_RUNTIME_FLAGS_H_
#define OVERLAP_LAUNCHER_RUNTIME_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace overlap::launcher {

struct RuntimeFlag {
  const char* flag;        // "--fusion-threshold-mb"
  const char* env;         // "OVERLAP_FUSION_THRESHOLD"
  const char* value_name;  // "MB", shown in --help
  const char* help;        // one sentence for --help
  // Checks the value and converts it to what the runtime expects; InvalidArgument naming the flag.
  absl::StatusOr<std::string> (*convert)(absl::string_view flag, absl::string_view value);
};

// Every runtime flag, in the order --help lists them.
absl::Span<const RuntimeFlag> RuntimeFlags();

// The flag named `flag` (with its leading dashes), or nullptr.
const RuntimeFlag* FindRuntimeFlag(absl::string_view flag);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_RUNTIME_FLAGS_H_
