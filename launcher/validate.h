// Checks that parsed options describe a job that can run, without touching the machine: rank count,
// slots, program, and options that only make sense together. The host and program checks against
// the machine are in preflight.h.
#ifndef OVERLAP_LAUNCHER_VALIDATE_H_
#define OVERLAP_LAUNCHER_VALIDATE_H_

#include "absl/status/status.h"
#include "launcher/options.h"

namespace overlap::launcher {

// InvalidArgument with one line naming the option and the fix: -np missing, no program, more ranks
// than slots without --oversubscribe, --stall-timeout below --stall-warning; in elastic mode,
// --min-np above --max-np or -np outside them, no hosts, or both a discovery script and -H.
absl::Status Validate(const LaunchOptions& options);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_VALIDATE_H_
