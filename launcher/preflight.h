// Checks against the machine before launching, so a job that cannot run fails in seconds with one
// line instead of as a wall of mpirun output: the program and mpirun exist and are executable, the
// timeline's directory exists, and every remote host answers through the rsh agent mpirun will use.
#ifndef OVERLAP_LAUNCHER_PREFLIGHT_H_
#define OVERLAP_LAUNCHER_PREFLIGHT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "launcher/options.h"

namespace overlap::launcher {

// The absolute path of `program` (as given, or found in `path_env` when it has no '/').
// NotFound or PermissionDenied naming the program and what is wrong.
absl::StatusOr<std::string> ResolveProgram(const std::string& program, const std::string& path_env);

// The program and mpirun, the timeline directory, then every host (reachability.h): the order in
// which a user would fix them.
absl::Status Preflight(const LaunchOptions& options);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_PREFLIGHT_H_
