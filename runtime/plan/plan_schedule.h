// The per-tensor view of a plan's delays and update periods (overlap.h, PlanSchedule), which the
// runtime publishes for programs that correct their optimizer for stale gradients.
#ifndef OVERLAP_RUNTIME_PLAN_PLAN_SCHEDULE_H_
#define OVERLAP_RUNTIME_PLAN_PLAN_SCHEDULE_H_

#include <map>
#include <string>
#include <vector>

#include "runtime/plan/executable_plan.h"
#include "runtime/overlap.h"

namespace overlap {

// Each tensor of `plan` that some bucket delays or updates with a period > 1, with all its
// slices in element order (synchronous slices included, with delay 0 and period 1). Allgather
// buckets (DeAR's second halves) repeat what their reduce-scatter moved and are not listed.
std::map<std::string, std::vector<ScheduledSlice>> DelayedSlices(const ExecutablePlan& plan);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLAN_PLAN_SCHEDULE_H_
