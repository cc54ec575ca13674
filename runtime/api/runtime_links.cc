// Runtime's view of its executors' link probes (collectives/link_adaptation.h): what Stats, the
// log and the timeline say about the links.
#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/api/runtime.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

// The ranks of the cross-host communicator that `rank` belongs to, in its rank order: the ranks
// that are as many ranks into their hosts as `rank` is into its own (MpiExecutor::SplitByHost).
std::vector<int> CrossRanks(const std::vector<std::string>& hosts, int rank) {
  std::map<std::string, int> seen;
  std::vector<int> local_index(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) local_index[r] = seen[hosts[r]]++;
  std::vector<int> out;
  for (size_t r = 0; r < hosts.size(); ++r) {
    if (local_index[r] == local_index[static_cast<size_t>(rank)]) out.push_back(static_cast<int>(r));
  }
  return out;
}

}  // namespace

void Runtime::NoteLinkProbe(const LinkReport& report) {
  // The probed communicator's rank i is world rank i when flat, else the i-th of the cross ranks.
  const std::vector<int> ranks =
      report.cross_host ? CrossRanks(link_hosts_, rank_) : std::vector<int>();
  // A straggler's lateness: how much sooner than the median its allreduces ended.
  std::vector<double> sorted = report.waits;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  std::vector<std::string> parts;
  for (size_t i = 0; i < report.rates.size(); ++i) {
    const size_t world = report.cross_host && i < ranks.size() ? static_cast<size_t>(ranks[i]) : i;
    const std::string name =
        world < link_hosts_.size() ? link_hosts_[world] : absl::StrCat("rank ", world);
    std::string part = absl::StrFormat("%s %.1f MB/s", name, report.rates[i] / 1e6);
    if (i < report.shares.size()) absl::StrAppendFormat(&part, " %.0f%%", 100 * report.shares[i]);
    if (std::find(report.stragglers.begin(), report.stragglers.end(), static_cast<int>(i)) !=
            report.stragglers.end() &&
        i < report.waits.size()) {
      absl::StrAppendFormat(&part, " late %.0f ms", 1e3 * (median - report.waits[i]));
    }
    parts.push_back(std::move(part));
  }
  const std::string rates = absl::StrJoin(parts, ", ");
  // The probe on the timeline's "link probe" track, named by what it measured.
  const absl::Time now = absl::Now();
  const char* what = report.rates_measured ? "link probe" : "lateness check";
  timeline_.Span("link probe", absl::StrCat(what, ", channel ", report.channel, ": ", rates).c_str(),
                 now - absl::Seconds(report.seconds), now);
  const int verdict = report.shares.empty() ? 0 : 1;
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    link_rates_ = rates;
    changed = verdict != link_verdict_;
    link_verdict_ = verdict;
  }
  if (rank_ != 0) return;
  const std::string line = absl::StrFormat(
      "overlap: %s (channel %d, %.0f ms%s): %s; allreduces of 1 MiB and more run %s", what,
      report.channel, 1e3 * report.seconds,
      report.bytes > 0 ? absl::StrFormat(", rounds of %d KiB", report.bytes >> 10) : "", rates,
      verdict == 1 ? "weighted by these shares (OVERLAP_ADAPTIVE_ALLREDUCE)" : "unweighted");
  if (changed) {
    spdlog::info("{}", line);
  } else {
    spdlog::debug("{}", line);
  }
}

}  // namespace overlap
