#include "runtime/plan/cycle_detector.h"

#include <algorithm>

namespace overlap {

void CycleDetector::Reset() {
  current_.clear();
  current_observed_.clear();
  current_rounds_.clear();
  recent_.clear();
  current_set_.clear();
  current_start_.reset();
}

std::optional<LearnedStep> CycleDetector::Observe(int32_t id, std::optional<uint64_t> observed,
                                                  std::optional<uint64_t> agreed_launches) {
  if (steps_needed_ <= 0) return std::nullopt;
  const uint64_t stamp = observed.has_value()         ? *observed
                         : current_observed_.empty() ? 0
                                                     : current_observed_.back();
  if (!current_set_.contains(id)) {
    if (current_.empty()) {
      current_start_ = agreed_launches;
      current_started_at_ = absl::Now();
    }
    current_.push_back(id);
    current_observed_.push_back(stamp);
    current_rounds_.push_back(round_);
    current_set_.insert(id);
    return std::nullopt;
  }
  recent_.push_back(ClosedStep{current_set_, current_start_});
  if (recent_.size() > static_cast<size_t>(steps_needed_)) recent_.pop_front();
  std::optional<LearnedStep> learned;
  if (recent_.size() == static_cast<size_t>(steps_needed_)) {
    // The ids of every one of the last steps, in the last step's order: an id that comes only
    // now and then (a loss reduced every tenth step) stays negotiated.
    LearnedStep step;
    for (size_t i = 0; i < current_.size(); ++i) {
      const bool always = std::all_of(recent_.begin(), recent_.end(), [&](const ClosedStep& c) {
        return c.ids.contains(current_[i]);
      });
      if (!always) continue;
      step.ids.push_back(current_[i]);
      step.observed.push_back(current_observed_[i]);
      step.rounds.push_back(current_rounds_[i]);
    }
    if (!step.ids.empty()) {
      const std::optional<uint64_t>& first = recent_.front().start;
      step.launches_unchanged =
          first.has_value() && agreed_launches.has_value() && *first == *agreed_launches;
      step.step_time = absl::Now() - current_started_at_;
      learned = std::move(step);
    }
  }
  current_.assign(1, id);
  current_observed_.assign(1, stamp);
  current_rounds_.assign(1, round_);
  current_set_.clear();
  current_set_.insert(id);
  current_start_ = agreed_launches;
  current_started_at_ = absl::Now();
  return learned;
}

}  // namespace overlap
