// Runs the mpirun command and watches it: its stdout passes straight through, its stderr passes
// through line by line except the rank wrappers' start and end lines (rank_report.h). The first
// rank failure is announced at once; mpirun then has options.kill_grace_s to stop the other ranks
// before overlaprun terminates it, so a host that dropped off the network cannot keep the job
// alive. Ranks that have not started within options.start_timeout_s (a daemon that never came up)
// also end the job, naming those ranks and their hosts.
#ifndef OVERLAP_LAUNCHER_RUN_JOB_H_
#define OVERLAP_LAUNCHER_RUN_JOB_H_

#include <string>
#include <vector>

#include "launcher/options.h"

namespace overlap::launcher {

// Returns overlaprun's exit status: 0 when every rank succeeded; the first failed rank's status
// (128 + signal for a signal) when one failed; 1 when ranks did not start in time; mpirun's status
// when mpirun failed by itself.
// SIGINT, SIGTERM and SIGHUP sent to overlaprun are passed on to mpirun.
int RunJob(const std::vector<std::string>& mpirun_argv, const LaunchOptions& options);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_RUN_JOB_H_
