// A scheduled plan's checkpoint for tests: plan_checkpoint_test checks its encoding and its
// refusals against it, and tests/fuzz/make_seeds writes it as plan_checkpoint_fuzz's seed.
// Header-only, since make_seeds is built outside Bazel (tools/fuzz.sh).
#ifndef OVERLAP_TESTS_RUNTIME_SAMPLE_PLAN_CHECKPOINT_H_
#define OVERLAP_TESTS_RUNTIME_SAMPLE_PLAN_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/plan/plan_checkpoint.h"
#include "scheduler/plan.h"

namespace overlap {

// The agreed operation of a gradient: an average of `elements` float32 values under `name`.
inline Response SampleTensor(const std::string& name, int64_t elements) {
  Response r;
  r.name = name;
  r.cache_id = 7;
  r.request.name = name;
  r.request.kind = OpKind::kAllreduce;
  r.request.op = ReduceOp::kAverage;
  r.request.tensors.push_back(TensorMeta{DataType::kFloat32, {elements}});
  r.request.plan_may_delay = true;  // a gradient, which deft's plan may delay
  return r;
}

// deft's shape: bucket 0 (60 elements of "w") with delay 1, period 2, phase 1; bucket 1 (the
// rest of "w" and all of "b") synchronous. After 8 passes bucket 0 holds a residual and pass 7's
// result (7 % 2 == 1), due at pass 8.
inline PlanCheckpoint SamplePlanCheckpoint() {
  sched::Plan plan;
  plan.planner = "deft";
  sched::Bucket first;
  first.op = sched::Collective::kAllreduce;
  first.slices.push_back(sched::TensorSlice{0, "w", 0, 60});
  first.delay = 1;
  first.period = 2;
  first.phase = 1;
  sched::Bucket second;
  second.op = sched::Collective::kAllreduce;
  second.slices.push_back(sched::TensorSlice{0, "w", 60, 40});
  second.slices.push_back(sched::TensorSlice{1, "b", 0, 5});
  plan.buckets = {first, second};
  PlanCheckpoint c;
  c.plan = plan.Serialize();
  c.tensors = {SampleTensor("w", 100), SampleTensor("b", 5)};
  c.step_ms = 512.5;
  c.predicted_step_ms = 498.25;
  c.state.passes = 8;
  c.state.residuals = {std::vector<uint8_t>(240, 3), {}};
  c.state.results.push_back(PlanDelays::State::Held{0, 7, std::vector<uint8_t>(240, 9)});
  return c;
}

}  // namespace overlap

#endif  // OVERLAP_TESTS_RUNTIME_SAMPLE_PLAN_CHECKPOINT_H_
