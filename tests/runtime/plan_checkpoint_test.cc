// PlanCheckpoint (runtime/plan_checkpoint.h): a scheduled plan and its delayed state survive
// encoding, and a checkpoint that is damaged or does not fit its plan is refused with the cause.
// Pure logic: no MPI (the multi-rank resume is scheduled_resume_2ranks_test).
#include "runtime/plan_checkpoint.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>

namespace overlap {
namespace {

Response Tensor(const std::string& name, int64_t elements) {
  Response r;
  r.name = name;
  r.cache_id = 7;
  r.request.name = name;
  r.request.kind = OpKind::kAllreduce;
  r.request.op = ReduceOp::kAverage;
  r.request.tensors.push_back(TensorMeta{DataType::kFloat32, {elements}});
  return r;
}

// deft's shape: bucket 0 (60 elements of "w") with delay 1, period 2, phase 1; bucket 1 (the
// rest of "w" and all of "b") synchronous.
PlanCheckpoint Checkpoint() {
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
  c.tensors = {Tensor("w", 100), Tensor("b", 5)};
  c.step_ms = 512.5;
  c.predicted_step_ms = 498.25;
  c.state.passes = 8;  // passes 0..7 ran; pass 7 communicated (7 % 2 == 1), due at 8
  c.state.residuals = {std::vector<uint8_t>(240, 3), {}};
  c.state.results.push_back(PlanDelays::State::Held{0, 7, std::vector<uint8_t>(240, 9)});
  return c;
}

TEST_CASE("a checkpoint round-trips and gives back its plan") {
  const PlanCheckpoint saved = Checkpoint();
  absl::StatusOr<PlanCheckpoint> c = DecodePlanCheckpoint(EncodePlanCheckpoint(saved));
  REQUIRE(c.ok());
  CHECK(c->plan == saved.plan);
  REQUIRE(c->tensors.size() == 2);
  CHECK(c->tensors[1].request == saved.tensors[1].request);
  CHECK(c->tensors[0].cache_id == -1);  // a fresh process has negotiated nothing
  CHECK(c->step_ms == 512.5);
  CHECK(c->predicted_step_ms == 498.25);
  CHECK(c->state.passes == 8);
  CHECK(c->state.residuals == saved.state.residuals);
  REQUIRE(c->state.results.size() == 1);
  CHECK(c->state.results[0].bucket == 0);
  CHECK(c->state.results[0].pass == 7);
  CHECK(c->state.results[0].values == saved.state.results[0].values);

  absl::StatusOr<ExecutablePlan> plan = CheckpointedPlan(*c, 1);
  REQUIRE(plan.ok());
  CHECK(plan->source == "deft");
  REQUIRE(plan->buckets.size() == 2);
  CHECK(plan->buckets[0].period == 2);
  CHECK(plan->entries[0].cache_id == -1);
  CHECK(plan->buckets_of[0] == std::vector<int>{0, 1});
}

TEST_CASE("damaged bytes are refused, whatever is cut") {
  const std::string bytes = EncodePlanCheckpoint(Checkpoint());
  for (size_t keep : {size_t{0}, size_t{10}, bytes.size() / 2, bytes.size() - 1}) {
    INFO("first " << keep << " of " << bytes.size() << " bytes");
    absl::StatusOr<PlanCheckpoint> c = DecodePlanCheckpoint(bytes.substr(0, keep));
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK_FALSE(DecodePlanCheckpoint(bytes + "x").ok());
}

std::string Refusal(const PlanCheckpoint& c, int channels = 1) {
  absl::StatusOr<ExecutablePlan> plan = CheckpointedPlan(c, channels);
  return plan.ok() ? "" : std::string(plan.status().message());
}

TEST_CASE("a state that does not fit its plan is refused, naming the bucket and the cause") {
  PlanCheckpoint c = Checkpoint();
  c.state.residuals[0].resize(100);
  CHECK_THAT(Refusal(c), Catch::Contains("plan bucket 0: a residual of 100 bytes, expected 240"));

  c = Checkpoint();
  c.state.residuals[1].assign(180, 0);
  CHECK_THAT(Refusal(c),
             Catch::Contains("plan bucket 1: a residual, but the bucket has no update"));

  c = Checkpoint();
  c.state.results[0].pass = 6;  // an off-period pass: it never communicated
  CHECK_THAT(Refusal(c), Catch::Contains("plan bucket 0: a result of pass 6"));

  c = Checkpoint();
  c.state.passes = 10;  // pass 7's result was due at 8: delivered long ago
  CHECK_THAT(Refusal(c), Catch::Contains("not held after 10 passes"));

  c = Checkpoint();
  c.state.results.push_back(c.state.results[0]);
  CHECK_THAT(Refusal(c), Catch::Contains("two results of pass 7"));

  c = Checkpoint();
  c.state.results[0].values.pop_back();
  CHECK_THAT(Refusal(c), Catch::Contains("a result of 239 bytes, expected 240"));

  c = Checkpoint();
  c.state.residuals.pop_back();
  CHECK_THAT(Refusal(c), Catch::Contains("residuals for 1 buckets, but the plan has 2"));
}

TEST_CASE("a plan that does not fit its saved tensors is refused") {
  PlanCheckpoint c = Checkpoint();
  c.tensors[1] = Tensor("b", 4);  // the plan slices 5 elements of it
  CHECK_THAT(Refusal(c), Catch::Contains("does not fit its saved tensors"));

  c = Checkpoint();
  c.plan = "not a plan";
  CHECK_THAT(Refusal(c), Catch::Contains("the saved plan does not decode"));
}

}  // namespace
}  // namespace overlap
