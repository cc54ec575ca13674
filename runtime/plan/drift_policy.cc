#include "runtime/plan/drift_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace overlap {

DriftPolicy::DriftPolicy(double relative, double min_ms, int64_t interval,
                         int64_t confirm_interval)
    : relative_(relative),
      min_ms_(std::max(0.0, min_ms)),
      interval_(std::max<int64_t>(1, interval)),
      confirm_interval_(std::max<int64_t>(1, confirm_interval)) {}

void DriftPolicy::OnAdopted() {
  has_baseline_ = false;
  baseline_ = {};
  drifted_checks_ = 0;
  first_check_ = true;
  baseline_wall_ms_ = 0;
}

double DriftPolicy::Threshold(const StepWindow& now) const {
  return std::max({relative_ * baseline_.median_ms,
                   2 * std::max(baseline_.spread_ms, now.spread_ms), min_ms_});
}

bool DriftPolicy::Drifted(const StepWindow& now) const {
  if (!enabled() || !has_baseline_ || baseline_.median_ms <= 0 || now.median_ms <= 0) {
    return false;
  }
  return std::abs(now.median_ms - baseline_.median_ms) > Threshold(now);
}

bool DriftPolicy::OnChecked(bool some_rank_drifted, const StepWindow& now, double job_wall_ms) {
  if (judging_) {  // the first check under a changed re-plan: did it shorten the step?
    judging_ = false;
    const bool measured = drifted_wall_ms_ > 0 && job_wall_ms > 0;
    const bool paid =
        !measured ||
        drifted_wall_ms_ - job_wall_ms >= std::max(min_ms_, kPaidFraction * drifted_wall_ms_);
    backoff_ = paid ? 1 : std::min(kMaxBackoff, 2 * backoff_);
  }
  if (first_check_) {
    first_check_ = false;
    baseline_wall_ms_ = job_wall_ms;
  }
  drifted_checks_ = some_rank_drifted ? drifted_checks_ + 1 : 0;
  if (drifted_checks_ >= 2) {  // twice in a row: a change, not one noisy window
    drifted_checks_ = 0;
    // What the dropped plan ran at: the lower of its first check's step and the drift's, so that
    // a re-plan is not credited with a slow spell that would have passed anyway.
    drifted_wall_ms_ = baseline_wall_ms_ > 0 && job_wall_ms > 0
                           ? std::min(baseline_wall_ms_, job_wall_ms)
                           : job_wall_ms;
    return true;
  }
  if (!has_baseline_ && !some_rank_drifted && now.median_ms > 0) {
    baseline_ = now;
    has_baseline_ = true;
  }
  return false;
}

int64_t DriftPolicy::NextCheckIn() const {
  return drifted_checks_ > 0 ? confirm_interval_ : interval_ * backoff_;
}

void DriftPolicy::OnReplanned(bool changed) {
  if (changed) {
    judging_ = true;
  } else {
    backoff_ = std::min(kMaxBackoff, 2 * backoff_);
  }
}

std::string DriftPolicy::Explain(const StepWindow& now) const {
  if (!has_baseline_) return absl::StrFormat("%.1f ms, the baseline", now.median_ms);
  return absl::StrFormat(
      "%.1f ms against %.1f ms under the plan (spread %.1f / %.1f ms); a drift needs %.1f ms",
      now.median_ms, baseline_.median_ms, now.spread_ms, baseline_.spread_ms, Threshold(now));
}

}  // namespace overlap
