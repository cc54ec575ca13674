#include "runtime/cycle_detector.h"

#include <algorithm>

namespace overlap {

void CycleDetector::Reset() {
  current_.clear();
  current_rounds_.clear();
  current_set_.clear();
  last_sorted_.clear();
  repeats_ = 0;
  step_starts_.clear();
  current_start_.reset();
}

std::optional<LearnedStep> CycleDetector::Observe(int32_t id,
                                                  std::optional<uint64_t> agreed_launches) {
  if (steps_needed_ <= 0) return std::nullopt;
  if (!current_set_.contains(id)) {
    if (current_.empty()) {
      current_start_ = agreed_launches;
      current_started_at_ = absl::Now();
    }
    current_.push_back(id);
    current_rounds_.push_back(round_);
    current_set_.insert(id);
    return std::nullopt;
  }
  std::vector<int32_t> sorted = current_;
  std::sort(sorted.begin(), sorted.end());
  if (sorted == last_sorted_) {
    ++repeats_;
  } else {
    last_sorted_ = std::move(sorted);
    repeats_ = 1;
    step_starts_.clear();
  }
  step_starts_.push_back(current_start_);
  if (step_starts_.size() > static_cast<size_t>(steps_needed_)) {
    step_starts_.erase(step_starts_.begin());
  }
  std::optional<LearnedStep> learned;
  if (repeats_ >= steps_needed_) {
    learned = LearnedStep{current_, current_rounds_, false, absl::Now() - current_started_at_};
    const std::optional<uint64_t>& first = step_starts_.front();
    learned->launches_unchanged =
        first.has_value() && agreed_launches.has_value() && *first == *agreed_launches;
  }
  current_.assign(1, id);
  current_rounds_.assign(1, round_);
  current_set_.clear();
  current_set_.insert(id);
  current_start_ = agreed_launches;
  current_started_at_ = absl::Now();
  return learned;
}

}  // namespace overlap
