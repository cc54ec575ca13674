// Checks against the machine before launching, so a job that cannot run fails in seconds with one
// line instead of as a wall of mpirun output: the program and mpirun exist and are executable, the
// timeline's directory exists, and every remote host answers through the rsh agent mpirun will use.
#ifndef OVERLAP_LAUNCHER_PREFLIGHT_H_
#define OVERLAP_LAUNCHER_PREFLIGHT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "launcher/options.h"

namespace overlap::launcher {

// The absolute path of `program` (as given, or found in `path_env` when it has no '/').
// NotFound or PermissionDenied naming the program and what is wrong.
absl::StatusOr<std::string> ResolveProgram(const std::string& program, const std::string& path_env);

// True for names of this machine: localhost, loopback addresses, its hostname, its addresses.
bool IsLocalHost(const std::string& host);

// The rsh agent's argv prefix: --rsh-agent, else OMPI_MCA_plm_rsh_agent (its first choice), else
// ssh; ssh gets BatchMode and a connect timeout so a password prompt or a dead host cannot hang.
std::vector<std::string> AgentCommand(const LaunchOptions& options, double timeout_s);

// Runs `agent host true` for every non-local host at once and waits at most start_timeout_s.
// Unavailable naming the host, the agent, and the agent's last line of stderr or the timeout.
absl::Status CheckHostsReachable(const LaunchOptions& options);

// All checks above, in the order a user would fix them.
absl::Status Preflight(const LaunchOptions& options);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_PREFLIGHT_H_
