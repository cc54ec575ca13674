#include "launcher/failure_log.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace overlap::launcher {

bool FailureLog::Add(const RankReport& report) {
  reports_.push_back(report);
  if (announced_ || report.stopped_by_launcher) return false;
  announced_ = true;
  return true;
}

std::optional<RankReport> FailureLog::Cause() const {
  std::optional<RankReport> own, any;
  for (const RankReport& r : reports_) {
    if (!any || r.end_ms < any->end_ms) any = r;
    if (!r.stopped_by_launcher && (!own || r.end_ms < own->end_ms)) own = r;
  }
  return own ? own : any;
}

std::string FailureLog::Summary(int64_t job_end_ms) const {
  std::optional<RankReport> cause = Cause();
  if (!cause) return "";
  int stopped = 0, failed = 0;
  for (const RankReport& r : reports_) {
    if (r.rank == cause->rank && r.end_ms == cause->end_ms) continue;
    ++(r.stopped_by_launcher ? stopped : failed);
  }
  return absl::StrFormat(
      "overlaprun: job failed: rank %d on host %s %s; after it %d rank%s failed and %d %s stopped; "
      "the job ended %.2f s after the first failure",
      cause->rank, cause->host, DescribeEnd(*cause), failed, failed == 1 ? "" : "s", stopped,
      stopped == 1 ? "was" : "were", static_cast<double>(job_end_ms - cause->end_ms) / 1000.0);
}

int FailureLog::ExitStatus(int mpirun_status) const {
  std::optional<RankReport> cause = Cause();
  if (cause) return ExitStatusFor(*cause);
  return mpirun_status;
}

}  // namespace overlap::launcher
