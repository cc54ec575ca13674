// How one rank ended, as the rank wrapper reports it to overlaprun through mpirun's forwarded
// stderr: one line with a fixed marker, so overlaprun can pick it out of the ranks' own output on
// any host mpirun reaches, without a shared filesystem or another connection.
#ifndef OVERLAP_LAUNCHER_RANK_REPORT_H_
#define OVERLAP_LAUNCHER_RANK_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace overlap::launcher {

inline constexpr char kRankReportMarker[] = "@@overlaprun-rank-end@@";

struct RankReport {
  enum class How {
    kExited,      // exited with a non-zero status
    kSignaled,    // killed by a signal
    kExecFailed,  // the program could not be started on that host
  };
  int rank = -1;
  std::string host;
  int pid = 0;
  How how = How::kExited;
  int code = 0;  // exit status, signal number, or errno for kExecFailed
  // Wall-clock time the rank ended, in ms since the epoch; orders failures across ranks.
  int64_t end_ms = 0;
  // True when the rank was killed by a signal after mpirun asked its wrapper to stop it (another
  // rank had failed, or the user interrupted the job).
  bool stopped_by_launcher = false;
};

// The wrapper's first line once the program is running: lets overlaprun see that every rank
// started, and name the ranks (and hosts) that did not within --start-timeout.
inline constexpr char kRankStartMarker[] = "@@overlaprun-rank-start@@";

// "@@overlaprun-rank-start@@ rank=R\n".
std::string FormatRankStart(int rank);

// The rank in a start line (marker anywhere in `line`), or nullopt.
std::optional<int> ParseRankStart(absl::string_view line);

// One line (with '\n') holding the marker and every field.
std::string FormatRankReport(const RankReport& report);

// The report in `line` if it holds the marker (anywhere, so prefixes such as mpirun's
// --tag-output do not matter) and every field parses; nullopt otherwise.
std::optional<RankReport> ParseRankReport(absl::string_view line);

// "exited with status 3", "was killed by signal 9 (SIGKILL)", "could not start: ..." for messages.
std::string DescribeEnd(const RankReport& report);

// "SIGKILL" for 9; "signal 77" when the number has no name.
std::string SignalName(int sig);

// The exit status overlaprun returns for this failure: the rank's status, 128+signal like a shell,
// or 127 when the program could not start.
int ExitStatusFor(const RankReport& report);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_RANK_REPORT_H_
