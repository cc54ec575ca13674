#include "scheduler/cluster/contention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace overlap::sched::cluster {

double ContentionModel::Slowdown(int k) const {
  if (k <= 1) {
    return 1.0;
  }
  // With u = 1, max(1, k x 1.0) is exactly k: the default is k (1 + eta (k - 1)), bit for bit.
  return std::max(1.0, k * link_utilization) * (1.0 + eta * (k - 1));
}

absl::Status ContentionModel::Validate() const {
  if (!std::isfinite(eta) || eta < 0) {
    return absl::InvalidArgumentError(absl::StrCat("eta: expected a number >= 0, got ", eta));
  }
  if (!std::isfinite(link_utilization) || link_utilization <= 0 || link_utilization > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("link_utilization: expected a number in (0, 1], got ", link_utilization));
  }
  return absl::OkStatus();
}

bool AdaDualShares(double new_solo_s, double running_remaining_s, const ContentionModel& model) {
  const double c = model.Slowdown(2);
  if (c < 1.5) {
    // Sharing costs the pair less than it gives: whichever ends first, the sum drops.
    return running_remaining_s > 0;
  }
  return new_solo_s * (2 * c - 2) < running_remaining_s;
}

std::vector<double> LinkFinishTimes(const std::vector<LinkTransfer>& transfers,
                                    const ContentionModel& model) {
  const int n = static_cast<int>(transfers.size());
  std::vector<double> remaining(n), finish(n, -1);
  for (int i = 0; i < n; ++i) {
    remaining[i] = transfers[i].solo_s;
  }
  double now = 0;
  int done = 0;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (n > 0) {
    now = transfers[0].start_s;
    for (const LinkTransfer& t : transfers) {
      now = std::min(now, t.start_s);
    }
  }
  while (done < n) {
    std::vector<int> active;
    double next_start = kInf;
    for (int i = 0; i < n; ++i) {
      if (finish[i] >= 0) {
        continue;
      }
      if (transfers[i].start_s <= now) {
        active.push_back(i);
      } else {
        next_start = std::min(next_start, transfers[i].start_s);
      }
    }
    if (active.empty()) {
      now = next_start;
      continue;
    }
    const double rate = 1.0 / model.Slowdown(static_cast<int>(active.size()));
    double least = kInf;
    for (int i : active) {
      least = std::min(least, remaining[i]);
    }
    const double step = std::min(least / rate, next_start - now);
    for (int i : active) {
      remaining[i] -= step * rate;
    }
    now += step;
    for (int i : active) {
      // Transfers that reached zero together finish together; the tolerance absorbs rounding.
      if (remaining[i] <= 1e-12 * std::max(1.0, transfers[i].solo_s)) {
        finish[i] = now;
        ++done;
      }
    }
  }
  return finish;
}

}  // namespace overlap::sched::cluster
