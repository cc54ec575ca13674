// The rank wrapper: mpirun starts every rank as `overlaprun --rank-wrapper -- program args`, and
// the wrapper runs the program as its child, forwards the signals mpirun sends, and when the
// program fails writes a RankReport line (rank_report.h) to stderr for overlaprun to read, then
// lingers for the peer grace before ending: mpirun aborts the whole job as soon as one rank's
// process ends non-zero, which would kill the other ranks before they print their own errors.
// Only a process that watches the program from its own host knows the rank, host, and exit status
// or signal together; mpirun's own message lacks the host and folds signals into exit codes.
#ifndef OVERLAP_LAUNCHER_RANK_WRAPPER_H_
#define OVERLAP_LAUNCHER_RANK_WRAPPER_H_

#include <string>
#include <vector>

namespace overlap::launcher {

// Runs `program` (argv, looked up in PATH) and returns the status the wrapper should exit with:
// the program's exit status, 128 + signal when it was killed, 127 when it could not start.
// The rank comes from OMPI_COMM_WORLD_RANK (or PMIX_RANK), the host from gethostname().
// After a failure the wrapper ends `peer_grace_s` later, or at once when mpirun stops it.
int RunRankWrapper(const std::vector<std::string>& program, double peer_grace_s);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_RANK_WRAPPER_H_
