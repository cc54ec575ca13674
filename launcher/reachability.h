// Whether the hosts of a job answer, checked the way mpirun will reach them: through the rsh agent
// (ssh by default), all hosts at once, within a deadline. Names of this machine need no agent.
#ifndef OVERLAP_LAUNCHER_REACHABILITY_H_
#define OVERLAP_LAUNCHER_REACHABILITY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "launcher/options.h"

namespace overlap::launcher {

// True for names of this machine: localhost, loopback addresses, its hostname, its addresses.
bool IsLocalHost(const std::string& host);

// The rsh agent's argv prefix: --rsh-agent, else OMPI_MCA_plm_rsh_agent (its first choice), else
// ssh; ssh gets BatchMode and a connect timeout so a password prompt or a dead host cannot hang.
std::vector<std::string> AgentCommand(const LaunchOptions& options, double timeout_s);

// The payload of CheckHostsReachable's error: the host that did not answer, for the elastic
// driver to leave out (absl::Status::GetPayload).
inline constexpr char kUnreachableHostPayload[] = "overlap.launcher/unreachable-host";

// Runs `agent host true` for every non-local host at once and waits at most start_timeout_s.
// Unavailable naming the host, the agent, and the agent's last line of stderr or the timeout,
// with the host also as the kUnreachableHostPayload payload.
absl::Status CheckHostsReachable(const LaunchOptions& options);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_REACHABILITY_H_
