#include "scheduler/lookahead.h"

#include <catch2/catch.hpp>

#include "absl/strings/str_replace.h"

#include "scheduler/planner.h"
#include "scheduler/simulator.h"
#include "tests/scheduler/test_util.h"

namespace overlap::sched {
namespace {

using testing::MakeProfile;

// Whether the update of communicating pass c reaches a tensor (delay d, period p, phase f)
// before the forward of pass n: c + d <= n - 1.
bool Applied(int c, int n, int d, int p, int f) { return c >= 0 && c % p == f && c + d <= n - 1; }

TEST_CASE("PendingPasses and CarriedPasses match enumeration") {
  for (int d = 0; d <= 3; ++d) {
    for (int p = 1; p <= 8; ++p) {
      for (int f = 0; f < p; ++f) {
        for (int n = 0; n < 40; ++n) {
          INFO("delay " << d << " period " << p << " phase " << f << " pass " << n);
          int last = -1;
          for (int c = 0; c < n; ++c) {
            if (Applied(c, n, d, p, f)) last = c;
          }
          CHECK(PendingPasses(n, d, p, f) == (last < 0 ? 0 : n - 1 - last));
          // Pass n sends the passes since the communicating one before it.
          int carried = 0;
          if (n % p == f) {
            for (int j = n; j >= 0 && (j == n || j % p != f); --j) ++carried;
          }
          CHECK(CarriedPasses(n, p, f) == carried);
        }
      }
    }
  }
}

TEST_CASE("LookAheadSteps counts what the adapters' look-ahead runs") {
  // Replays the adapter (overlap/torch/staleness.py): before each forward, the update that came
  // (k passes' sum as k steps); then scratch steps: from the true value (one per pending pass)
  // after an update or when the last pass did not look ahead, else one from the last point.
  for (int d = 0; d <= 3; ++d) {
    for (int p = 1; p <= 6; ++p) {
      if (d == 0 && p == 1) continue;
      for (int f = 0; f < p; ++f) {
        bool have_point = false;
        for (int n = 0; n < 40; ++n) {
          INFO("delay " << d << " period " << p << " phase " << f << " pass " << n);
          const int c = n - 1 - d;  // the pass whose update comes before this forward
          const bool update = c >= 0 && c % p == f;
          int steps = 0;
          if (update) {
            steps += std::min(p, c + 1) - 1;
            have_point = false;
          }
          const int pending = PendingPasses(n, d, p, f);
          if (pending > 0) steps += (have_point && p > 1) ? 1 : pending;
          have_point = pending > 0;
          CHECK(LookAheadSteps(n, d, p, f) == steps);
        }
      }
    }
  }
  // Delay 1, period 2, phase 0, from pass 4 on: an update of two passes as two steps and one
  // scratch step, then one step from the last point: 1.5 extra steps a pass (2 recomputing).
  CHECK(LookAheadSteps(4, 1, 2, 0) == 2);
  CHECK(LookAheadSteps(5, 1, 2, 0) == 1);
  CHECK(LookAheadSteps(6, 1, 2, 0) == 2);
}

TEST_CASE("The simulator charges look-ahead's steps before each delayed layer's forward") {
  // Compute-bound (1 us of traffic): the iteration is the compute stream's.
  Profile p = MakeProfile({1, 1}, {2, 2}, {1000, 3000}, 8);
  const CostModel cost = CostModel::Linear(0, 1);
  Plan plan = *MakePlan("wfbp", p, cost, {});
  plan.staleness = 1;
  plan.layerwise_update = true;
  for (Bucket& b : plan.buckets) b.delay = 1;
  const double base = Simulate(p, plan, cost)->iteration_ms;
  CHECK(base == Approx(14));
  for (TensorInfo& t : p.tensors) t.looks_ahead = true;
  absl::StatusOr<SimResult> one = Simulate(p, plan, cost);
  REQUIRE(one.ok());
  // Delay 1: one scratch step a pass, the whole update once more.
  CHECK(one->lookahead_ms == Approx(8));
  CHECK(one->iteration_ms == Approx(22));
  CHECK(one->compute_ms == Approx(22));
  // The second layer's tensor (3/4 of the bytes) also with period 2: 1.5 steps a pass.
  for (Bucket& b : plan.buckets) {
    bool second = false;
    for (const TensorSlice& s : b.slices) second = second || s.tensor == 1;
    if (second) b.period = 2;
  }
  absl::StatusOr<SimResult> periodic = Simulate(p, plan, cost);
  REQUIRE(periodic.ok());
  CHECK(periodic->lookahead_ms == Approx(2 * 1 + 6 * 1.5));
  CHECK(periodic->iteration_ms == Approx(14 + 11));
  // A synchronous plan costs nothing more.
  Plan sync = *MakePlan("wfbp", p, cost, {});
  CHECK(Simulate(p, sync, cost)->iteration_ms == Approx(14));
  // The profile's JSON keeps the flag.
  absl::StatusOr<Profile> back = ParseProfileJson(p.ToJson(), "test");
  REQUIRE(back.ok());
  CHECK(back->tensors[1].looks_ahead);
  // A tensor that does not look ahead (predicted) costs nothing more.
  p.tensors[1].looks_ahead = false;
  CHECK(Simulate(p, plan, cost)->lookahead_ms == Approx(2));
  // Where the program measured its optimizer step itself (updates at forward leave update_ms
  // small), that prices the steps: 20 ms, a quarter for the first tensor.
  p.optimizer_ms = 20;
  CHECK(Simulate(p, plan, cost)->lookahead_ms == Approx(5));
  absl::StatusOr<Profile> again = ParseProfileJson(p.ToJson(), "test");
  REQUIRE(again.ok());
  CHECK(again->optimizer_ms == 20);
  CHECK_FALSE(ParseProfileJson(absl::StrReplaceAll(p.ToJson(), {{"20", "-1"}}), "t").ok());
}

TEST_CASE("A profile measured under a delayed plan gives back that plan's look-ahead") {
  Profile p = MakeProfile({5, 5}, {2, 2}, {1000, 3000}, 8);
  for (TensorInfo& t : p.tensors) t.looks_ahead = true;
  const CostModel cost = CostModel::Linear(0, 1);
  Plan plan = *MakePlan("wfbp", p, cost, {});
  plan.staleness = 1;
  plan.layerwise_update = true;
  for (Bucket& b : plan.buckets) {
    b.delay = 1;
    for (const TensorSlice& s : b.slices) {
      if (s.tensor == 1) b.period = 2;
    }
  }
  const LookAheadCost before(p, plan);
  const std::vector<double> mean = before.MeanMsByLayer();
  REQUIRE(mean.size() == 2);
  CHECK(mean[0] == Approx(2));        // 2 ms of update, one step a pass
  CHECK(mean[1] == Approx(6 * 1.5));  // 6 ms, 1.5 steps a pass: more than its 5 ms forward
  // The measured profile: what the plan ran, look-ahead included.
  Profile measured = p;
  measured.layers[0].forward_ms += 2;
  measured.layers[1].forward_ms += 9;
  REQUIRE(measured.Finalize().ok());
  const double measured_ms = Simulate(measured, plan, cost)->iteration_ms;
  CHECK(TakeOutLookAhead(plan, &measured) == Approx(11));
  CHECK(measured.layers[0].forward_ms == Approx(5));
  CHECK(measured.layers[1].forward_ms == Approx(5));
  CHECK(measured.forward_ms == Approx(10));
  // Simulated again, the plan costs what it was measured at, not its look-ahead twice.
  CHECK(Simulate(measured, plan, cost)->iteration_ms == Approx(measured_ms - 11));
  const double unmeasured_ms = Simulate(p, plan, cost)->iteration_ms;
  CHECK(Simulate(measured, plan, cost)->iteration_ms == Approx(unmeasured_ms));
  // Never below nothing: a forward shorter than the mean gives all it has.
  Profile short_forward = MakeProfile({1, 1}, {2, 2}, {1000, 3000}, 8);
  for (TensorInfo& t : short_forward.tensors) t.looks_ahead = true;
  CHECK(TakeOutLookAhead(plan, &short_forward) == Approx(2));
  CHECK(short_forward.forward_ms == Approx(0));
}

}  // namespace
}  // namespace overlap::sched
