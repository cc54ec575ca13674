// PlanCheckpoint: the scheduled plan in force and its state between steps, as the third part of
// SaveCompressionState's snapshot (runtime/overlap.h).
//
// A run resumed from a checkpoint must go on exactly as the saved one: the same buckets, the same
// passes (a bucket with period p communicates in the passes k with k % p == phase), the residuals
// of the steps it skipped and the reduced results it has not yet delivered. Planning again would
// give another plan (a new profile, new timings) and would reduce the first steps synchronously,
// so the checkpoint carries the plan itself, with the agreed operation of each of its tensors:
// a fresh process adopts it before its first submission, with nothing to negotiate.
//
// The bytes come from disk, so decoding checks everything: truncation, the plan's own encoding,
// every slice against the saved operations (ScheduledPlan, as for a plan broadcast by rank 0),
// and the delayed state against the plan (PlanDelays::Check).
#ifndef OVERLAP_RUNTIME_PLAN_PLAN_CHECKPOINT_H_
#define OVERLAP_RUNTIME_PLAN_PLAN_CHECKPOINT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/plan/executable_plan.h"
#include "runtime/negotiation/messages.h"
#include "runtime/planes/plan_delays.h"

namespace overlap {

struct PlanCheckpoint {
  std::string plan;               // sched::Plan::Serialize() (ExecutablePlan::scheduled)
  std::vector<Response> tensors;  // the agreed operation of each tensor the plan runs
  double step_ms = 0;             // the measured step when saved: the plan's patience
  double predicted_step_ms = 0;   // the simulator's, for Stats()
  PlanDelays::State state;
};

// The checkpoint of `plan` (a scheduled plan) in `state`.
PlanCheckpoint MakePlanCheckpoint(const ExecutablePlan& plan, PlanDelays::State state,
                                  double step_ms, double predicted_step_ms);

std::string EncodePlanCheckpoint(const PlanCheckpoint& checkpoint);
// InvalidArgument saying what is wrong: truncated bytes, a bad plan, a state that does not fit.
absl::StatusOr<PlanCheckpoint> DecodePlanCheckpoint(absl::string_view bytes);

// The executable plan of a decoded checkpoint on a runtime with `num_channels` channels, checked
// as a broadcast plan is; its entries carry no negotiation cache ids.
absl::StatusOr<ExecutablePlan> CheckpointedPlan(const PlanCheckpoint& checkpoint, int num_channels);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLAN_PLAN_CHECKPOINT_H_
