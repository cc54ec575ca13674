#include "runtime/plan/step_profiler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "scheduler/measured_profile.h"

namespace overlap {
namespace {

// Milliseconds clamped into [0, limit]; an infinite duration lands on a bound.
double ClampedMs(absl::Duration d, double limit) {
  return std::min(std::max(absl::ToDoubleMilliseconds(d), 0.0), limit);
}

// The median of `values` (the mean of the middle two for an even count); 0 if empty.
double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

// Sorts `tensors` (in submission order) by name; returns, for each submission in order, where
// its tensor went.
std::vector<size_t> SortByName(std::vector<sched::TensorMeasurement>* tensors) {
  std::vector<size_t> by_name(tensors->size());
  std::iota(by_name.begin(), by_name.end(), size_t{0});
  std::sort(by_name.begin(), by_name.end(),
            [&](size_t a, size_t b) { return (*tensors)[a].name < (*tensors)[b].name; });
  std::vector<size_t> submit_order(by_name.size());
  std::vector<sched::TensorMeasurement> sorted;
  sorted.reserve(by_name.size());
  for (size_t i = 0; i < by_name.size(); ++i) {
    sorted.push_back(std::move((*tensors)[by_name[i]]));
    submit_order[by_name[i]] = i;
  }
  *tensors = std::move(sorted);
  return submit_order;
}

// The median of field(step) over `steps`.
template <typename Step, typename Field>
double MedianOf(const std::vector<Step>& steps, Field field) {
  std::vector<double> values;
  values.reserve(steps.size());
  for (const Step& step : steps) values.push_back(field(step));
  return Median(std::move(values));
}

// Time intervals [first, second) a program spent blocked in Wait, merged into disjoint ones.
class BlockedTime {
 public:
  // Adds [from, to); an empty or reversed interval adds nothing.
  void Add(absl::Time from, absl::Time to) {
    if (from < to) intervals_.emplace_back(from, to);
  }
  // Sorts and merges the intervals; call after the last Add and before Within.
  void Merge() {
    std::sort(intervals_.begin(), intervals_.end());
    std::vector<std::pair<absl::Time, absl::Time>> merged;
    for (const auto& interval : intervals_) {
      if (!merged.empty() && interval.first <= merged.back().second) {
        merged.back().second = std::max(merged.back().second, interval.second);
      } else {
        merged.push_back(interval);
      }
    }
    intervals_ = std::move(merged);
  }
  // The blocked time inside [from, to).
  absl::Duration Within(absl::Time from, absl::Time to) const {
    absl::Duration total = absl::ZeroDuration();
    for (const auto& [start, end] : intervals_) {
      const absl::Time a = std::max(start, from), b = std::min(end, to);
      if (a < b) total += b - a;
    }
    return total;
  }

 private:
  std::vector<std::pair<absl::Time, absl::Time>> intervals_;
};

// A window's compute time in ms: its length less the time blocked inside it, at least 0.
double ComputeMs(absl::Time from, absl::Time to, const BlockedTime& blocked) {
  return std::max(absl::ToDoubleMilliseconds((to - from) - blocked.Within(from, to)), 0.0);
}

}  // namespace

const char* StepPhaseName(StepPhase phase) {
  switch (phase) {
    case StepPhase::kForward:
      return "forward";
    case StepPhase::kBackward:
      return "backward";
    case StepPhase::kUpdate:
      return "update";
  }
  return "?";
}

StepProfiler::StepProfiler(int steps_needed) : steps_needed_(std::max(1, steps_needed)) {}

int64_t StepProfiler::OnPhase(StepPhase phase, absl::Time now) {
  absl::MutexLock lock(&mu_);
  used_ = true;
  if (phase == StepPhase::kForward) {
    ++step_;
    // The step ending here stays open (to be closed by the next backward marker) only if it
    // saw backward and update in order; the one before it should have closed by now.
    const bool complete =
        !open_.empty() && current_ordered_ && open_.back().update != absl::InfinitePast();
    std::vector<OpenStep> open;
    if (complete) open.push_back(std::move(open_.back()));
    if (!complete && !open_.empty()) closed_.clear();
    open.emplace_back().forward = now;
    open_ = std::move(open);
    current_ordered_ = true;
    return step_;
  }
  if (step_ == 0) return 0;  // before the first forward: part of no step
  OpenStep& current = open_.back();
  const bool backward_seen = current.backward != absl::InfinitePast();
  const bool update_seen = current.update != absl::InfinitePast();
  if (phase == StepPhase::kBackward) {
    if (!current_ordered_ || backward_seen || update_seen) {
      Break();
    } else {
      current.backward = now;
      if (open_.size() == 2) {
        Close(open_.front(), current);
        open_.erase(open_.begin());
      }
    }
  } else if (!current_ordered_ || !backward_seen || update_seen) {
    Break();
  } else {
    current.update = now;
  }
  return step_;
}

void StepProfiler::Break() {
  closed_.clear();
  if (open_.size() == 2) open_.erase(open_.begin());
  current_ordered_ = false;
}

void StepProfiler::Close(const OpenStep& previous, const OpenStep& next) {
  ClosedStep step;
  // Every submission's wait, and the time it blocked: from its first call until the handle
  // completed, at most until now (this step closes at next.backward).
  std::vector<WaitTimes> waits;
  waits.reserve(previous.submissions.size());
  BlockedTime blocked;
  for (const Submission& s : previous.submissions) {
    const WaitTimes& w = waits.emplace_back(s.first_wait ? s.first_wait() : WaitTimes{});
    if (w.called != absl::InfiniteFuture()) blocked.Add(w.called, std::min(w.done, next.backward));
  }
  blocked.Merge();
  // Step k's measurement: the forward that reads its gradients (step k+1's), its own backward
  // and update, each less the time blocked in Wait inside it. A clock that went backwards gives
  // 0, not a negative time.
  step.forward_ms = ComputeMs(next.forward, next.backward, blocked);
  step.backward_ms = ComputeMs(previous.backward, previous.update, blocked);
  step.update_ms = ComputeMs(previous.update, next.forward, blocked);
  step.optimizer_ms = previous.noted_update_ms + next.noted_forward_ms;
  step.wall_ms = std::max(0.0, absl::ToDoubleMilliseconds(next.backward - previous.backward));
  const bool gradients_marked =
      std::any_of(previous.submissions.begin(), previous.submissions.end(),
                  [](const Submission& s) { return s.may_delay; });
  for (size_t i = 0; i < previous.submissions.size(); ++i) {
    const Submission& s = previous.submissions[i];
    if (gradients_marked && !s.may_delay) continue;  // read within the step: left negotiated
    const absl::Time called = waits[i].called;
    sched::TensorMeasurement& t = step.tensors.emplace_back();
    t.name = s.name;
    t.bytes = s.bytes;
    t.dtype = s.dtype;
    t.may_delay = s.may_delay;
    t.looks_ahead = s.looks_ahead;
    t.ready_ms = ClampedMs(s.submitted - previous.backward, step.backward_ms);
    // Compute time from the forward's start to the first wait: the blocked time of earlier waits
    // in the forward does not count. Never waited: the end of the forward.
    t.first_use_ms = called == absl::InfiniteFuture()
                         ? step.forward_ms
                         : ClampedMs((called - next.forward) - blocked.Within(next.forward, called),
                                     step.forward_ms);
  }
  step.submit_order = SortByName(&step.tensors);

  auto same_set = [](const ClosedStep& a, const ClosedStep& b) {
    return std::equal(a.tensors.begin(), a.tensors.end(), b.tensors.begin(), b.tensors.end(),
                      [](const sched::TensorMeasurement& x, const sched::TensorMeasurement& y) {
                        return x.name == y.name && x.bytes == y.bytes && x.may_delay == y.may_delay;
                      });
  };
  if (!closed_.empty() && !same_set(closed_.back(), step)) closed_.clear();
  closed_.push_back(std::move(step));
  if (closed_.size() > static_cast<size_t>(steps_needed_)) closed_.erase(closed_.begin());
}

void StepProfiler::OnSubmit(const std::string& name, int64_t bytes, DataType dtype,
                            FirstWaitFn first_wait, absl::Time now, bool may_delay,
                            bool on_device, bool looks_ahead) {
  absl::MutexLock lock(&mu_);
  if (open_.empty()) return;  // before the first forward: part of no step
  device_tensors_ = device_tensors_ || on_device;
  OpenStep& current = open_.back();
  if (!current.names.insert(name).second) return;
  current.submissions.push_back(
      Submission{name, bytes, dtype, std::move(first_wait), now, may_delay, looks_ahead});
}

void StepProfiler::OnUpdateTime(double ms) {
  absl::MutexLock lock(&mu_);
  if (open_.empty() || !(ms >= 0)) return;
  OpenStep& current = open_.back();
  (current.backward == absl::InfinitePast() ? current.noted_forward_ms
                                            : current.noted_update_ms) += ms;
}

bool StepProfiler::saw_device_tensors() const {
  absl::MutexLock lock(&mu_);
  return device_tensors_;
}

bool StepProfiler::used() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

int StepProfiler::steady_steps() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(closed_.size());
}

absl::StatusOr<sched::Profile> StepProfiler::MakeProfile(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  if (closed_.size() < static_cast<size_t>(steps_needed_)) {
    return absl::FailedPreconditionError(
        absl::StrCat("step profile '", model, "': ", closed_.size(), " steady steps measured, ",
                     steps_needed_, " needed"));
  }
  sched::IterationMeasurement m;
  m.model = model;
  m.forward_ms = MedianOf(closed_, [](const ClosedStep& s) { return s.forward_ms; });
  m.backward_ms = MedianOf(closed_, [](const ClosedStep& s) { return s.backward_ms; });
  m.update_ms = MedianOf(closed_, [](const ClosedStep& s) { return s.update_ms; });
  m.optimizer_ms = MedianOf(closed_, [](const ClosedStep& s) { return s.optimizer_ms; });
  // Every step in the run has the same sorted tensor list, so index i is one tensor throughout.
  const ClosedStep& newest = closed_.back();
  for (size_t i : newest.submit_order) {
    sched::TensorMeasurement& t = m.tensors.emplace_back(newest.tensors[i]);
    t.ready_ms = MedianOf(closed_, [i](const ClosedStep& s) { return s.tensors[i].ready_ms; });
    t.first_use_ms =
        MedianOf(closed_, [i](const ClosedStep& s) { return s.tensors[i].first_use_ms; });
  }
  return sched::ProfileFromMeasurements(m);
}

double StepProfiler::median_step_ms() const {
  absl::MutexLock lock(&mu_);
  return MedianOf(closed_,
                  [](const ClosedStep& s) { return s.forward_ms + s.backward_ms + s.update_ms; });
}

double StepProfiler::step_ms_spread() const {
  absl::MutexLock lock(&mu_);
  std::vector<double> values;
  values.reserve(closed_.size());
  for (const ClosedStep& s : closed_) values.push_back(s.forward_ms + s.backward_ms + s.update_ms);
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return values[(3 * n) / 4] - values[n / 4];
}

int64_t StepProfiler::step_bytes() const {
  absl::MutexLock lock(&mu_);
  if (closed_.empty()) return 0;
  int64_t bytes = 0;
  for (const sched::TensorMeasurement& t : closed_.back().tensors) bytes += t.bytes;
  return bytes;
}

double StepProfiler::median_wall_ms() const {
  absl::MutexLock lock(&mu_);
  return MedianOf(closed_, [](const ClosedStep& s) { return s.wall_ms; });
}

void StepProfiler::Reset() {
  absl::MutexLock lock(&mu_);
  closed_.clear();
}

}  // namespace overlap
