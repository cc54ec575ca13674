// Launcher options that configure the overlap runtime in every rank: the entries of the OVERLAP_*
// table (runtime/api/env_vars.h) that name an overlaprun option. Each sets one variable, converted to
// the runtime's unit and checked with the runtime's own checks, so overlaprun refuses before
// launching what every rank's Init would refuse. Adding an option is adding a Flag to its entry in
// runtime/api/env_vars.cc.
#ifndef OVERLAP_LAUNCHER_RUNTIME_FLAGS_H_
#define OVERLAP_LAUNCHER_RUNTIME_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "runtime/api/env_vars.h"

namespace overlap::launcher {

// Every variable with a runtime option, in the order --help lists them (the table's).
absl::Span<const env::Var* const> RuntimeFlags();

// The variable that option `flag` (with its leading dashes) sets, or nullptr.
const env::Var* FindRuntimeFlag(absl::string_view flag);

// The variable's value for the option's `value`; InvalidArgument naming the option, the value and
// what it accepts: "--num-channels '17' is not valid: expected an integer in 1..16".
absl::StatusOr<std::string> RuntimeFlagValue(const env::Var& var, absl::string_view value);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_RUNTIME_FLAGS_H_
