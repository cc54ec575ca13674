// PlanCheckpoint (runtime/plan/plan_checkpoint.h): a scheduled plan and its delayed state survive
// encoding, and a checkpoint that is damaged or does not fit its plan is refused with the cause.
// Pure logic: no MPI (the multi-rank resume is scheduled_resume_2ranks_test).
#include "runtime/plan/plan_checkpoint.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "tests/runtime/sample_plan_checkpoint.h"

namespace overlap {
namespace {

PlanCheckpoint Checkpoint() { return SamplePlanCheckpoint(); }

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

TEST_CASE("a checkpoint of the first format is refused with what to do") {
  std::string bytes = EncodePlanCheckpoint(Checkpoint());
  const size_t at = bytes.find("overlap-plan-v2");
  REQUIRE(at != std::string::npos);
  bytes[at + 14] = '1';
  absl::StatusOr<PlanCheckpoint> c = DecodePlanCheckpoint(bytes);
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(std::string(c.status().message()),
             Catch::Contains("saved by an earlier version of overlap (overlap-plan-v1)") &&
                 Catch::Contains("resume without it"));
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
  c.tensors[1] = SampleTensor("b", 4);  // the plan slices 5 elements of it
  CHECK_THAT(Refusal(c), Catch::Contains("does not fit its saved tensors"));

  c = Checkpoint();
  c.plan = "not a plan";
  CHECK_THAT(Refusal(c), Catch::Contains("the saved plan does not decode"));
}

}  // namespace
}  // namespace overlap
