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
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "launcher/rank_report.h"

namespace overlap::launcher {

// The host in mpirun's (ORTE's) report of a lost daemon, which says, among other lines,
//   Remote daemon: [[29664,0],3] on node h3
// nullopt for any other line.
std::optional<std::string> ParseLostDaemonHost(absl::string_view line);

// A rank's report that a peer's host stopped answering on the runtime's control connection
// (runtime/control/control_plane.h), which says
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
// as {reporting rank 0, the peer 2}; nullopt for any other line.
struct ExitedPeer {
  int reporter = -1;
  int peer = -1;
};
std::optional<ExitedPeer> ParseExitedPeer(absl::string_view line);

class FailureLog {
 public:
  static constexpr int64_t kSimultaneousMs = 500;

  // `rank_hosts[r]` is rank r's host (as --map-by slot places it), empty or short when unknown;
  // it names hosts' ranks in messages and tells which host a report came from.
  explicit FailureLog(std::vector<std::string> rank_hosts = {});

  // Records one report. Returns true when it is the first report of a rank that failed on its own,
  // which is when overlaprun announces the failure and starts the kill grace period.
  bool Add(const RankReport& report);

  bool empty() const { return reports_.empty(); }

  // Whether `rank` has reported its end.
  bool Reported(int rank) const;

  // A report that contact with `host` was lost: mpirun lost its daemon there (`reporter` -1), or
  // rank `reporter`'s control connection to it stopped answering. Lost contact is the cause of
  // the job's end, whatever the ranks reported: they failed or were stopped because of it.
  // Returns true for the first such report (the one overlaprun announces). Which host is blamed
  // is decided at the end (Summary), from every report:
  //  - mpirun's first report, when there is one;
  //  - else, when the first reporter is a worker that lost rank 0's host (the control plane is a
  //    star around rank 0) and a rank on a third host saw a process on that host exit (so its
  //    network still worked), the reporter's own host: it is the one that went silent;
  //  - else, when rank 0 lost two or more hosts, rank 0's own host;
  //  - else the host the first report names.
  bool AddLostHost(const std::string& host, int reporter, int64_t at_ms);

  // "h3 (rank 2)" or "h1 (ranks 0, 1)": the host and the ranks on it; just the host when none.
  std::string HostAndRanks(const std::string& host) const;
  // Rank `rank`'s host; empty when unknown.
  std::string HostOf(int rank) const;

  // A rank saw rank `peer`'s process end under it (ParseExitedPeer). Among the failures that
  // ended together, a rank its peers saw exit first is the cause: the peers' own exits follow
  // from it, however the wrappers' end times came out. Seen before any failure was announced,
  // `peer` ended before the launcher stopped anything, so it failed on its own even when its
  // wrapper, slow to report on a loaded machine, took it for stopped (a SIGKILL that reached it
  // just before mpirun's stop request did).
  // `reporter` is the rank that saw it (-1: unknown); a reporter on another host proves that the
  // peer's host could still be reached.
  void AddExitedPeer(int peer, int reporter = -1);
  bool lost_host() const { return !lost_.empty(); }

  // The failure to blame: the earliest one not caused by the launcher, else the earliest of all.
  std::optional<RankReport> Cause() const;

  // The final line, e.g. "overlaprun: job failed: rank 1 on host h2 was killed by signal 9
  // (SIGKILL); after it 0 ranks failed and 3 were stopped; the job ended 0.41 s after the first
  // failure", or after a lost host "overlaprun: job failed: mpirun lost contact with host h3
  // (rank 2): the host or its network is down; 1 rank failed ..." ("rank 0 lost contact ..." when
  // a rank noticed first, "rank 2 on host h3 stopped hearing from ..." when the reporter's own
  // host is blamed).
  // `job_end_ms` is when mpirun exited. Only meaningful when !empty() or lost_host().
  std::string Summary(int64_t job_end_ms) const;

  // The host the failure is blamed on: the lost host (AddLostHost's rules), else the cause's
  // host; empty when neither is known. The elastic driver leaves it out of the next generation.
  std::string BlamedHost() const;

  // overlaprun's exit status: the cause's (rank_report.h ExitStatusFor), else mpirun's own status,
  // kept non-zero when mpirun failed. After a lost host, mpirun's status and at least 1.
  int ExitStatus(int mpirun_status) const;

 private:
  std::vector<RankReport> reports_;
  // Whether `r` failed on its own: not stopped by the launcher, or seen exiting before it could
  // have been.
  bool OnItsOwn(const RankReport& r) const;

  struct LostContact {
    std::string host;
    int reporter = -1;  // -1: mpirun
  };
  // After a lost host, which host is to blame (AddLostHost's rules) and the end of Summary's
  // first sentence: who lost contact with whom.
  struct Blame {
    std::string host;
    std::string sentence;
  };
  Blame BlameLostHost() const;
  std::string LostHostSentence() const;

  std::vector<std::string> rank_hosts_;
  std::vector<int> exited_peers_;       // AddExitedPeer's ranks, in the order reported
  std::vector<int> exited_unprompted_;  // those of them reported before any announcement
  std::vector<std::pair<int, int>> exited_seen_by_;  // {peer, reporter} with a known reporter
  bool announced_ = false;
  std::vector<LostContact> lost_;  // AddLostHost's reports, in order
  int64_t lost_at_ms_ = 0;         // when the first came
};

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_FAILURE_LOG_H_
