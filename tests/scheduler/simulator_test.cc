#include "scheduler/simulator.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "scheduler/builtin.h"
#include "scheduler/planner.h"
#include "tests/scheduler/test_util.h"

namespace overlap::sched {
namespace {

using testing::MakeProfile;
using testing::MgwfbpModelMs;
using testing::RunsUnderSanitizer;

TEST_CASE("wfbp and mgwfbp reproduce MG-WFBP's iteration model exactly under linear cost") {
  for (const std::string& model : BuiltinModelNames()) {
    const Profile profile = *LoadBuiltinProfile(model);
    for (auto [alpha_us, beta_us_per_mb] :
         {std::pair<double, double>{0, 0}, {50, 80}, {1000, 800}, {20000, 10}}) {
      const CostModel cost = CostModel::Linear(alpha_us, beta_us_per_mb);
      for (const char* planner : {"wfbp", "mgwfbp"}) {
        INFO(model << " " << planner << " alpha " << alpha_us << " beta " << beta_us_per_mb);
        auto plan = MakePlan(planner, profile, cost, {});
        REQUIRE(plan.ok());
        auto sim = Simulate(profile, *plan, cost);
        REQUIRE(sim.ok());
        CHECK(sim->converged);
        const double expected = MgwfbpModelMs(profile, *plan, cost);
        CHECK(sim->iteration_ms == Approx(expected).epsilon(1e-12));
        // Collectives run one at a time, in plan (= gradient-ready) order.
        for (size_t b = 1; b < sim->buckets.size(); ++b) {
          CHECK(sim->buckets[b].start_ms >= sim->buckets[b - 1].end_ms - 1e-9);
          CHECK(sim->buckets[b].ready_ms >= sim->buckets[b - 1].ready_ms);
        }
      }
    }
  }
}

// wfbp's one-tensor buckets merged into contiguous groups: bit i of `cuts` cuts after bucket i.
Plan Grouped(const Plan& wfbp, int cuts) {
  Plan grouped = wfbp;
  grouped.buckets.clear();
  Bucket current;
  const int n = static_cast<int>(wfbp.buckets.size());
  for (int i = 0; i < n; ++i) {
    current.slices.push_back(wfbp.buckets[i].slices[0]);
    current.bytes += wfbp.buckets[i].bytes;
    if (i == n - 1 || (cuts >> i & 1)) {
      grouped.buckets.push_back(current);
      current = Bucket();
    }
  }
  return grouped;
}

TEST_CASE("mgwfbp finds the optimal merge: brute force over all contiguous groupings") {
  // Tensors ready at 1, 2, 3 ms with a 1 ms startup: wfbp ends at 1 + 3 x 1.01 = 4.03 ms; the
  // best grouping is {t0}, {t1, t2}: t0 ends at 2.01, the pair starts at 3 and ends at 4.02.
  const Profile p = MakeProfile({1, 1, 1}, {1, 1, 1}, {10'000, 10'000, 10'000}, 0);
  const CostModel cost = CostModel::Linear(1000, 1000);  // 1 ms + 1 ms per MB
  auto mg = MakePlan("mgwfbp", p, cost, {});
  REQUIRE(mg.ok());
  CHECK(mg->buckets.size() == 2);
  CHECK(Simulate(p, *mg, cost)->iteration_ms == Approx(3 + 4.02));
  CHECK(Simulate(p, *MakePlan("wfbp", p, cost, {}), cost)->iteration_ms == Approx(3 + 4.03));
  // On a 12-layer model with uneven sizes, no grouping of the ready order beats the DP.
  const Profile q =
      MakeProfile({1, 2, 1, 3, 1, 1, 2, 1, 1, 2, 1, 1}, {2, 1, 3, 1, 2, 2, 1, 1, 3, 1, 2, 1},
                  {400'000, 4'000, 2'000'000, 40'000, 8'000, 1'000'000, 4, 300'000, 64, 5'000'000,
                   12'000, 700'000},
                  0.5);
  for (auto [alpha_us, beta] : {std::pair<double, double>{500, 1000}, {3000, 100}, {10, 2000}}) {
    const CostModel c = CostModel::Linear(alpha_us, beta);
    const Plan wfbp = *MakePlan("wfbp", q, c, {});
    double best = std::numeric_limits<double>::infinity();
    const int n = static_cast<int>(wfbp.buckets.size());
    for (int mask = 0; mask < (1 << (n - 1)); ++mask) {
      Plan grouped = Grouped(wfbp, mask);
      best = std::min(best, MgwfbpModelMs(q, grouped, c));
    }
    INFO("alpha " << alpha_us);
    CHECK(Simulate(q, *MakePlan("mgwfbp", q, c, {}), c)->iteration_ms == Approx(best));
  }
}

TEST_CASE("mgwfbp with two forms: brute force over groupings and each bucket's form") {
  // Two links' worth of cost on one channel: flat cheaper for small buckets (a lower fixed
  // cost), two-stage for large ones (a lower per-byte cost). No grouping of the ready order with
  // any choice of forms beats mgwfbp's plan with MakePlan's marks.
  const Profile q = MakeProfile({1, 2, 1, 1, 2, 1}, {2, 1, 3, 1, 2, 1},
                                {400'000, 4'000, 2'000'000, 40'000, 8'000, 1'000'000}, 0.5);
  for (auto [flat_alpha_us, two_alpha_us] :
       {std::pair<double, double>{100, 600}, {500, 2500}, {1000, 1000}}) {
    CostModel c = CostModel::Linear(flat_alpha_us, 2000);
    c.channels[0].two_stage = LinearTerm{two_alpha_us * 1e-6, 1200e-12};
    const Plan wfbp = *MakePlan("wfbp", q, c, {});
    const int n = static_cast<int>(wfbp.buckets.size());
    double best = std::numeric_limits<double>::infinity();
    for (int mask = 0; mask < (1 << (n - 1)); ++mask) {
      Plan grouped = Grouped(wfbp, mask);
      const int m = static_cast<int>(grouped.buckets.size());
      for (int forms = 0; forms < (1 << m); ++forms) {
        for (int b = 0; b < m; ++b) grouped.buckets[b].two_stage = (forms >> b & 1) != 0;
        best = std::min(best, Simulate(q, grouped, c)->iteration_ms);
      }
    }
    INFO("flat alpha " << flat_alpha_us << " us, two-stage alpha " << two_alpha_us << " us");
    const Plan mg = *MakePlan("mgwfbp", q, c, {});
    CHECK(Simulate(q, mg, c)->iteration_ms == Approx(best));
  }
}

TEST_CASE("No communication gives the compute time, for every planner") {
  const CostModel free_comm = CostModel::Linear(0, 0);
  for (const char* model : {"resnet50", "vgg16", "bert-base"}) {
    const Profile profile = *LoadBuiltinProfile(model);
    for (const std::string& planner : PlannerNames()) {
      INFO(model << " " << planner);
      PlannerOptions options;
      options.staleness = 1;
      auto plan = MakePlan(planner, profile, free_comm, options);
      REQUIRE(plan.ok());
      auto sim = Simulate(profile, *plan, free_comm);
      REQUIRE(sim.ok());
      CHECK(sim->iteration_ms == Approx(profile.compute_ms()).epsilon(1e-12));
      CHECK(sim->exposed_comm_ms == Approx(0).margin(1e-9));
    }
  }
}

TEST_CASE("No synchronous plan beats SynchronousBoundMs") {
  PlannerOptions options;  // staleness 0, period 1: every planner is synchronous
  size_t run = 0;
  for (const std::string& model : BuiltinModelNames()) {
    const Profile profile = *LoadBuiltinProfile(model);
    for (int workers : {4, 16, 256}) {
      const CostModel cost = CostModel::Algorithmic(Algorithm::kRing, workers, 5, 10);
      const double fused_ms =
          cost.Ms(0, Collective::kAllreduce, static_cast<double>(profile.total_bytes));
      const double bound = SynchronousBoundMs(profile, fused_ms);
      for (const std::string& planner : PlannerNames()) {
        // auto's plan is one of the others'; under a sanitizer one case in 5 runs.
        if (planner == "auto" || !RunsUnderSanitizer(run++, 5)) continue;
        INFO(model << " " << workers << " workers " << planner);
        auto plan = MakePlan(planner, profile, cost, options);
        REQUIRE(plan.ok());
        REQUIRE(plan->MaxDelay() == 0);
        for (const Bucket& b : plan->buckets) REQUIRE(b.period == 1);
        auto sim = Simulate(profile, *plan, cost);
        REQUIRE(sim.ok());
        CHECK(sim->iteration_ms >= bound * (1 - 1e-9));
      }
    }
  }
}

TEST_CASE("Infinite bandwidth gives compute time plus the latency left exposed") {
  const double inf = std::numeric_limits<double>::infinity();
  const CostModel cost = CostModel::Algorithmic(Algorithm::kRing, 16, 10, inf);  // 300 us
  const double latency_ms = 2 * 15 * 10e-3;
  // Layers' backward (>= 1 ms) hides every collective but the last one.
  const Profile p = MakeProfile({2, 3, 4, 5}, {1, 2, 3, 4}, {4000, 4000, 8000, 4}, 0.5);
  for (const char* planner : {"wfbp", "mgwfbp", "fusion"}) {
    INFO(planner);
    auto plan = MakePlan(planner, p, cost, {});
    REQUIRE(plan.ok());
    CHECK(Simulate(p, *plan, cost)->iteration_ms == Approx(p.compute_ms() + latency_ms));
  }
  // One fused bucket: compute + one latency, exactly.
  Plan fused = *MakePlan("wfbp", p, cost, {});
  Bucket all;
  for (const Bucket& b : fused.buckets) {
    all.slices.insert(all.slices.end(), b.slices.begin(), b.slices.end());
    all.bytes += b.bytes;
  }
  fused.buckets = {all};
  CHECK(Simulate(p, fused, cost)->iteration_ms == Approx(p.compute_ms() + latency_ms));
}

// US-Byte's (and ByteScheduler's) analytic model when every gradient is ready at the end of
// backward (all backward time in the last layer, so all gradients are ready together at B) and
// blocks go out in priority order: layer i's last block ends at e_i = B + sum_{j<=i} c_j, and
//   T = max(B + F, max_i (e_i + sum_{j>=i} f_j)).
double PriorityClosedFormMs(const Profile& p, const Plan& plan, const CostModel& cost) {
  const size_t n = p.layers.size();
  std::vector<double> comm(n, 0);
  for (const Bucket& b : plan.buckets) {
    comm[p.tensors[b.slices[0].tensor].layer] +=
        cost.Ms(0, Collective::kAllreduce, static_cast<double>(b.bytes));
  }
  double t = p.backward_ms + p.forward_ms;
  double e = p.backward_ms;
  for (size_t i = 0; i < n; ++i) {
    e += comm[i];
    double rest = 0;
    for (size_t j = i; j < n; ++j) {
      rest += p.layers[j].forward_ms;
    }
    t = std::max(t, e + rest);
  }
  return t;
}

TEST_CASE("usbyte and bytescheduler match the priority-scheduling closed form") {
  // Four layers; only the last has backward time, so every gradient is ready at B = 10 ms.
  const Profile p =
      MakeProfile({3, 2, 4, 1}, {0, 0, 0, 10}, {4'000'000, 2'000'000, 8'000'000, 1'000'000}, 0);
  for (auto [alpha_us, beta] : {std::pair<double, double>{0, 1000}, {300, 1000}, {2000, 200}}) {
    const CostModel cost = CostModel::Linear(alpha_us, beta);
    for (const char* planner : {"usbyte", "bytescheduler"}) {
      INFO(planner << " alpha " << alpha_us);
      auto plan = MakePlan(planner, p, cost, {});
      REQUIRE(plan.ok());
      auto sim = Simulate(p, *plan, cost);
      REQUIRE(sim.ok());
      CHECK(sim->iteration_ms == Approx(PriorityClosedFormMs(p, *plan, cost)).epsilon(1e-12));
    }
  }
  // With alpha = 0 the closed form does not depend on the blocks at all:
  // e = 10 + 4, 16, 24, 25; T = max(20, 14 + 10, 16 + 7, 24 + 5, 25 + 1) = 29.
  const CostModel beta_only = CostModel::Linear(0, 1000);
  auto plan = MakePlan("usbyte", p, beta_only, {});
  CHECK(Simulate(p, *plan, beta_only)->iteration_ms == Approx(29));
}

TEST_CASE("Delays let communication overlap the whole iteration") {
  // Communication (12 ms) exceeds the compute (9 ms): synchronous plans expose it, a plan with
  // every bucket delayed by one iteration only pays for the channel's throughput.
  const Profile p = MakeProfile({1, 1, 1}, {2, 2, 2}, {4'000'000, 4'000'000, 4'000'000}, 0);
  const CostModel cost = CostModel::Linear(0, 1000);
  Plan plan = *MakePlan("wfbp", p, cost, {});
  plan.staleness = 1;
  plan.layerwise_update = true;
  for (Bucket& b : plan.buckets) {
    b.delay = 1;
  }
  auto sim = Simulate(p, plan, cost);
  REQUIRE(sim.ok());
  CHECK(sim->iteration_ms == Approx(12));
  PlannerOptions options;
  options.staleness = 1;
  auto deft = MakePlan("deft", p, cost, options);
  REQUIRE(deft.ok());
  CHECK(Simulate(p, *deft, cost)->iteration_ms == Approx(12));
}

TEST_CASE("Update periods halve a bucket's traffic and the simulator averages the cycle") {
  const Profile p = MakeProfile({1}, {1}, {4'000'000}, 0);
  const CostModel cost = CostModel::Linear(0, 1000);  // 4 ms
  Plan plan = *MakePlan("wfbp", p, cost, {});
  CHECK(Simulate(p, plan, cost)->iteration_ms == Approx(6));
  plan.buckets[0].period = 2;
  auto sim = Simulate(p, plan, cost);
  REQUIRE(sim.ok());
  // Iterations alternate 6 ms (communicating) and 2 ms (not): 4 ms on average.
  CHECK(sim->iteration_ms == Approx(4));
  CHECK(sim->comm_ms == Approx(2));
}

TEST_CASE("Chrome trace output lists compute and channel events") {
  const Profile p = MakeProfile({1, 2}, {1, 2}, {4000, 8000}, 0.5);
  const CostModel cost = CostModel::Linear(100, 100);
  SimOptions options;
  options.record_trace = true;
  auto sim = Simulate(p, *MakePlan("wfbp", p, cost, {}), cost, options);
  REQUIRE(sim.ok());
  CHECK_THAT(sim->trace_json, Catch::Contains("traceEvents"));
  CHECK_THAT(sim->trace_json, Catch::Contains("bwd l1"));
  CHECK_THAT(sim->trace_json, Catch::Contains("allreduce #0"));
}

TEST_CASE("Two-stage buckets: planners mark them where they pay, the simulator charges the form") {
  const absl::StatusOr<Profile> p = LoadBuiltinProfile("bert-base");
  REQUIRE(p.ok());
  // 4 hosts of 2 at 1 Gbit/s, 40 Gbit/s within a host.
  CostModel cost = CostModel::Hierarchical(8, 2, 50, 1, 1, 40);
  cost.channels[0].algorithm = Algorithm::kRing;
  const CostModel flat = CostModel::Algorithmic(Algorithm::kRing, 8, 50, 1);
  for (const char* planner : {"mgwfbp", "bytescheduler", "dear", "deft"}) {
    INFO(planner);
    PlannerOptions options;
    absl::StatusOr<Plan> plan = MakePlan(planner, *p, cost, options);
    REQUIRE(plan.ok());
    int two_stage = 0;
    for (const Bucket& b : plan->buckets) {
      CHECK(b.two_stage == (b.op == Collective::kAllreduce &&
                            cost.channels[0].TwoStagePays(static_cast<double>(b.bytes))));
      two_stage += b.two_stage ? 1 : 0;
    }
    // The simulator charges each bucket its own form: the same plan all flat is slower.
    Plan all_flat = *plan;
    for (Bucket& b : all_flat.buckets) b.two_stage = false;
    const double marked_ms = Simulate(*p, *plan, cost)->iteration_ms;
    const double unmarked_ms = Simulate(*p, all_flat, cost)->iteration_ms;
    if (std::string(planner) == "dear") {
      CHECK(two_stage == 0);  // reduce-scatters and allgathers have one form
      CHECK(marked_ms == unmarked_ms);
      continue;
    }
    CHECK(two_stage > 0);
    CHECK(marked_ms < unmarked_ms);
    // And the planner with the form beats its plan on the flat ring alone (bert-base is
    // communication-bound here: about 1.75 / 1.5 on the network's share).
    const double flat_ms = Simulate(*p, *MakePlan(planner, *p, flat, options), flat)->iteration_ms;
    CHECK(marked_ms < 0.95 * flat_ms);
  }
  // two_stage_always marks every allreduce bucket, paying or not.
  PlannerOptions always;
  always.two_stage_always = true;
  absl::StatusOr<Plan> every = MakePlan("wfbp", *p, cost, always);
  REQUIRE(every.ok());
  for (const Bucket& b : every->buckets) CHECK(b.two_stage);
  // A cost model without the form marks nothing.
  absl::StatusOr<Plan> none = MakePlan("wfbp", *p, flat, always);
  REQUIRE(none.ok());
  for (const Bucket& b : none->buckets) CHECK_FALSE(b.two_stage);
}

TEST_CASE("Simulate rejects an invalid plan with ValidatePlan's message") {
  const Profile p = MakeProfile({1}, {1}, {16}, 0);
  Plan plan;
  plan.planner = "empty";
  auto sim = Simulate(p, plan, CostModel::Linear(1, 1));
  REQUIRE_FALSE(sim.ok());
  CHECK_THAT(std::string(sim.status().message()), Catch::Contains("not covered"));
}

}  // namespace
}  // namespace overlap::sched
