#include "runtime/plan/comm_meter.h"

#include <algorithm>
#include <vector>

namespace overlap {

CommMeter::CommMeter(int steps) : steps_(static_cast<size_t>(std::max(1, steps))) {}

void CommMeter::Add(absl::Time start, absl::Time done) {
  absl::MutexLock lock(&mu_);
  const absl::Time from = std::max(start, counted_until_);
  if (done > from) busy_ += done - from;
  counted_until_ = std::max(counted_until_, done);
}

void CommMeter::OnForward() {
  absl::MutexLock lock(&mu_);
  if (started_) {
    per_step_ms_.push_back(absl::ToDoubleMilliseconds(busy_));
    if (per_step_ms_.size() > steps_) per_step_ms_.pop_front();
  }
  started_ = true;
  busy_ = absl::ZeroDuration();
}

double CommMeter::busy_ms_per_step() const {
  absl::MutexLock lock(&mu_);
  if (per_step_ms_.empty()) return 0;
  std::vector<double> sorted(per_step_ms_.begin(), per_step_ms_.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

}  // namespace overlap
