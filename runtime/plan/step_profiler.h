// Step profiler: turns step markers and per-tensor submit / first-wait times into the
// sched::Profile the planners take.
//
// A step is forward, backward, update, marked by OnPhase in that order. For every tensor the
// runtime may plan (OnSubmit), the profiler records when its gradient was submitted, measured
// from the start of that step's backward (ready_ms), and when its handle was first waited on,
// measured from the start of the *next* step's forward (first_use_ms: the program needs the
// averaged gradient before that layer's forward). A wait before the next forward (a program that
// waits for everything before its optimizer step) counts as first use at 0; a handle not waited on
// by the end of the next forward counts as used at the end of that forward. Ready times are
// clamped into [0, backward_ms].
//
// Compute windows exclude time blocked in Wait on planned tensors. A wait blocks from its first
// call until its handle completed (nothing if it completed before the call), and at most until
// the step closes. Taking the program to be single-threaded, its waits sequential, the blocked
// time of step k's submissions' waits that falls inside a window (each interval clipped to it;
// overlapping intervals counted once) is subtracted from that window: from step k's backward
// (its backward marker to its update marker), its update (update marker to step k+1's forward
// marker) and step k+1's forward (forward marker to backward marker). A tensor's first use is the
// time from the forward's start to its first wait less the blocked time inside the forward before
// that wait, clamped into [0, forward_ms]. Every window and time is clamped at >= 0.
//
// A step that marks its gradients (OnSubmit's may_delay, from AllreduceOptions::plan_may_delay, as
// the adapters' optimizers do) is measured over those alone: its other allreduces are read within
// the step (a metric, SyncBatchNorm's statistics, waited on in the forward or backward that
// submitted them), which a profile of gradients cannot describe, so they stay negotiated instead
// of being fused into buckets that wait for gradients not yet computed. A step that marks none is
// measured over every tensor.
//
// Step k's measurement closes at the backward marker of step k+1 (when its first uses are known);
// its forward_ms is step k+1's, the one its first uses are measured in, and its backward_ms and
// update_ms are its own. MakeProfile() takes, over the last `steps_needed` closed steps in a row
// that submitted exactly the same set of tensors (names and sizes), the median of every time and
// hands it to sched::ProfileFromMeasurements. A step whose set differs from the previous one
// restarts the count; so does a step left unmeasured by out-of-order or missing markers.
//
// Threading: every method may be called from any thread; calls are serialised internally.
#ifndef OVERLAP_RUNTIME_PLAN_STEP_PROFILER_H_
#define OVERLAP_RUNTIME_PLAN_STEP_PROFILER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collectives/dtype.h"
#include "scheduler/measured_profile.h"
#include "scheduler/profile.h"

namespace overlap {

enum class StepPhase { kForward = 0, kBackward = 1, kUpdate = 2 };
const char* StepPhaseName(StepPhase phase);  // "forward", "backward", "update"

class StepProfiler {
 public:
  // When the handle of a submission was first waited on (called) and when its operation
  // completed (done); absl::InfiniteFuture() while it has not been / has not. The wait blocked
  // from `called` to `done` (clipped at the step's close; nothing if done <= called).
  struct WaitTimes {
    absl::Time called = absl::InfiniteFuture();
    absl::Time done = absl::InfiniteFuture();
  };
  // A submission's WaitTimes. Called when the step closes, with the profiler's lock held: it may
  // take its own locks but must not call back into the profiler. An empty function counts as
  // never waited.
  using FirstWaitFn = std::function<WaitTimes()>;

  // steps_needed below 1 counts as 1.
  explicit StepProfiler(int steps_needed);

  // A step marker. Out-of-order markers (update before backward, say) are tolerated: the step
  // they belong to is not measured, nor, if it had not closed yet, the step before it (whose
  // first uses that step's forward would have measured), and the steady run restarts. A step
  // missing its backward or update marker when the next forward comes counts the same way.
  // Markers before the first forward are ignored. Returns the number of the step this marker
  // belongs to (forward markers count steps from 1; 0 before the first forward).
  int64_t OnPhase(StepPhase phase, absl::Time now);

  // A submission of a tensor the runtime may plan, made during the current step. A name
  // submitted twice in one step keeps its first submission. Ignored before the first forward.
  // `may_delay`: a gradient a delayed plan may deliver late (AllreduceOptions::plan_may_delay);
  // false for a tensor the step reads at once, which the profile marks so no planner delays it.
  // `on_device`: the tensor is a GPU's (saw_device_tensors). `looks_ahead`:
  // AllreduceOptions::looks_ahead, passed on to the profile (sched::TensorInfo::looks_ahead).
  void OnSubmit(const std::string& name, int64_t bytes, DataType dtype, FirstWaitFn first_wait,
                absl::Time now, bool may_delay = true, bool on_device = false,
                bool looks_ahead = false);
  // The program's own measure of time its optimizer spent updating (NoteUpdateTime), wherever
  // that ran: in the update phase, or in the next forward (updates at forward). It is the
  // profile's optimizer_ms: a step's is what was noted in its update phase and in the forward
  // that follows. Ignored before the first forward.
  void OnUpdateTime(double ms);
  // Whether any tensor submitted in a step was on a GPU, ever (Reset keeps it).
  bool saw_device_tensors() const;

  // True once OnPhase has been called at least once (the program uses the step API).
  bool used() const;
  // Closed steps in a row with the same tensor set (capped at steps_needed).
  int steady_steps() const;

  // The median profile of the last steps_needed steady steps, named `model`.
  // FailedPrecondition while fewer have closed; otherwise what ProfileFromMeasurements returns.
  absl::StatusOr<sched::Profile> MakeProfile(const std::string& model) const;

  // Median forward + backward + update time of the last steady steps (ms); 0 if none.
  double median_step_ms() const;
  // Interquartile range of the same steps' forward + backward + update time (ms), nearest rank; 0
  // if none: how far the median can move on noise alone (runtime/plan/drift_policy.h).
  double step_ms_spread() const;
  // Bytes of every tensor the latest steady step submitted: the largest bucket a plan can make.
  // 0 if no step has closed.
  int64_t step_bytes() const;
  // Median wall time of the last steady steps, time blocked in Wait included (ms); 0 if none.
  // What a plan's communication costs shows here, not in median_step_ms.
  double median_wall_ms() const;

  // Forgets every closed step (the tensor set or the plan changed). Steps not yet closed are
  // kept: the next one to close starts the new run.
  void Reset();

 private:
  struct Submission {
    std::string name;
    int64_t bytes = 0;
    DataType dtype = DataType::kFloat32;
    FirstWaitFn first_wait;
    absl::Time submitted;
    bool may_delay = true;
    bool looks_ahead = false;
  };
  // A step whose markers are still arriving, or one waiting for the next step's backward marker
  // to close it. InfinitePast marks a phase not yet seen.
  struct OpenStep {
    absl::Time forward = absl::InfinitePast(), backward = absl::InfinitePast(),
               update = absl::InfinitePast();
    std::vector<Submission> submissions;  // in order of submission
    absl::flat_hash_set<std::string> names;
    double noted_forward_ms = 0;  // OnUpdateTime before the backward marker
    double noted_update_ms = 0;   // and after it
  };
  struct ClosedStep {
    double forward_ms = 0, backward_ms = 0, update_ms = 0;
    double optimizer_ms = 0;  // OnUpdateTime's, 0 where the program noted none
    double wall_ms = 0;  // backward to the next backward, waits included
    // Sorted by name, so that two steps with the same tensor set line up index by index.
    std::vector<sched::TensorMeasurement> tensors;
    std::vector<size_t> submit_order;  // indices into tensors, in order of submission
  };

  // Closes `previous` at `next`'s backward marker and appends it to the steady run.
  void Close(const OpenStep& previous, const OpenStep& next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An out-of-order marker in the current step: it and the previous step, if that has not
  // closed, go unmeasured, and the run restarts. The current step stays open (dropped at the next
  // forward) so that its submissions still have a step to go to.
  void Break() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int steps_needed_;
  mutable absl::Mutex mu_;
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  bool used_ ABSL_GUARDED_BY(mu_) = false;
  bool device_tensors_ ABSL_GUARDED_BY(mu_) = false;
  // The current step is open_.back() (from its forward marker on); while open_.size() == 2,
  // open_.front() is the previous step, waiting for the current one's backward marker.
  std::vector<OpenStep> open_ ABSL_GUARDED_BY(mu_);
  bool current_ordered_ ABSL_GUARDED_BY(mu_) = true;     // no marker of this step out of order
  std::vector<ClosedStep> closed_ ABSL_GUARDED_BY(mu_);  // steady run, oldest first
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLAN_STEP_PROFILER_H_
