// Collects the RankReports of one job and decides what overlaprun says and returns: the first rank
// that failed on its own (earliest end time among ranks the launcher did not stop) is the cause;
// the rest are consequences, counted but not blamed.
//
// End times come from wrappers on different processes (and hosts), each woken by the kernel when
// its rank ended. On a loaded machine a peer that noticed the failure can exit and be reported a
// few milliseconds before the rank that caused it. Peers that notice a failure end alike (the
// program's error status), the cause ends differently (its own status or a signal), so among
// failures within kSimultaneousMs of the first, the only one killed by a signal (not from the
// launcher: peers exit, they are not killed) is the cause, else the one rank that its peers saw
// exit (its control connections closed under them: AddExitedPeer), else a single one that ended
// unlike all the others; otherwise the earliest is. A rank killed by SIGPIPE (it wrote to a pipe or
// socket that a failure had closed) is a consequence, blamed only when no rank failed otherwise.
#ifndef OVERLAP_LAUNCHER_FAILURE_LOG_H_
#define OVERLAP_LAUNCHER_FAILURE_LOG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "launcher/rank_report.h"

namespace overlap::launcher {

// The host in mpirun's (ORTE's) report of a lost daemon, which says, among other lines,
//   Remote daemon: [[29664,0],3] on node h3
// nullopt for any other line.
std::optional<std::string> ParseLostDaemonHost(absl::string_view line);

// A rank's report that a peer's host stopped answering on the runtime's control connection
// (runtime/control_plane.h), which says
//   rank 0: lost the control connection to rank 2 (host h3): no answer for 5s: the host or ...
// as {reporting rank, the silent host}; nullopt for any other line, including a peer that exited
// (its connection closed: the peer's own report says why).
struct UnansweredPeer {
  int reporter = -1;
  std::string host;
};
std::optional<UnansweredPeer> ParseUnansweredPeer(absl::string_view line);

// A rank's report that a peer's process ended under it (its control connection closed), which
// says
//   rank 0: lost the control connection to rank 2 (host h3): the process exited or shut down early
// as the peer's rank (2); nullopt for any other line.
std::optional<int> ParseExitedPeer(absl::string_view line);

class FailureLog {
 public:
  static constexpr int64_t kSimultaneousMs = 500;

  // Records one report. Returns true when it is the first report of a rank that failed on its own,
  // which is when overlaprun announces the failure and starts the kill grace period.
  bool Add(const RankReport& report);

  bool empty() const { return reports_.empty(); }

  // Whether `rank` has reported its end.
  bool Reported(int rank) const;

  // A report that a host went away (it or its network): mpirun lost contact with its daemon
  // there, or a rank's control connection to it stopped answering. `who` names the host and its
  // ranks, e.g. "h3 (rank 2)"; `by` who noticed, "mpirun" or "rank 0". The first such report is
  // the cause of the job's end, whatever the ranks reported: they failed or were stopped because
  // of it. Returns true for the first one (later ones are ignored).
  bool AddLostHost(const std::string& who, const std::string& by, int64_t at_ms);

  // A rank saw rank `peer`'s process end under it (ParseExitedPeer). Among the failures that
  // ended together, a rank its peers saw exit first is the cause: the peers' own exits follow
  // from it, however the wrappers' end times came out. Seen before any failure was announced,
  // `peer` ended before the launcher stopped anything, so it failed on its own even when its
  // wrapper, slow to report on a loaded machine, took it for stopped (a SIGKILL that reached it
  // just before mpirun's stop request did).
  void AddExitedPeer(int peer);
  bool lost_host() const { return !lost_host_.empty(); }

  // The failure to blame: the earliest one not caused by the launcher, else the earliest of all.
  std::optional<RankReport> Cause() const;

  // The final line, e.g. "overlaprun: job failed: rank 1 on host h2 was killed by signal 9
  // (SIGKILL); after it 0 ranks failed and 3 were stopped; the job ended 0.41 s after the first
  // failure", or after a lost host "overlaprun: job failed: mpirun lost contact with host h3
  // (rank 2): the host or its network is down; after it ..." ("rank 0 lost contact ..." when a
  // rank noticed first).
  // `job_end_ms` is when mpirun exited. Only meaningful when !empty() or lost_host().
  std::string Summary(int64_t job_end_ms) const;

  // overlaprun's exit status: the cause's (rank_report.h ExitStatusFor), else mpirun's own status,
  // kept non-zero when mpirun failed. After a lost host, mpirun's status and at least 1.
  int ExitStatus(int mpirun_status) const;

 private:
  std::vector<RankReport> reports_;
  // Whether `r` failed on its own: not stopped by the launcher, or seen exiting before it could
  // have been.
  bool OnItsOwn(const RankReport& r) const;

  std::vector<int> exited_peers_;      // AddExitedPeer's ranks, in the order reported
  std::vector<int> exited_unprompted_;  // those of them reported before any announcement
  bool announced_ = false;
  std::string lost_host_;  // AddLostHost's `who`, empty when no host was lost
  std::string lost_by_;    // and its `by`
  int64_t lost_at_ms_ = 0;
};

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_FAILURE_LOG_H_
