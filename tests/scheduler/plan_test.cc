#include "scheduler/plan.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "scheduler/planner.h"
#include "tests/scheduler/test_util.h"

namespace overlap::sched {
namespace {

using testing::MakeProfile;

Plan TwoBucketPlan(const Profile& p) {
  Plan plan;
  plan.planner = "hand";
  plan.model = p.model;
  plan.staleness = 1;
  plan.layerwise_update = true;
  plan.budget_used = 0.25;
  Bucket a;
  a.slices = {{1, "t1", 0, 2}};
  a.bytes = 8;
  Bucket b;
  b.slices = {{1, "t1", 2, 2}, {0, "t0", 0, 4}};
  b.bytes = 24;
  b.delay = 1;
  b.lag = 1;
  b.period = 2;
  b.phase = 1;
  b.window = Window::kNextForward;
  b.compressor = "fp16";
  b.ratio = 0.5;
  plan.buckets = {a, b};
  return plan;
}

TEST_CASE("Serialize and Deserialize round-trip a plan") {
  const Profile p = MakeProfile({1, 1}, {1, 1}, {16, 16}, 0);
  const Plan plan = TwoBucketPlan(p);
  REQUIRE(ValidatePlan(plan, p, CostModel::Linear(1, 1)).ok());
  auto back = Plan::Deserialize(plan.Serialize());
  REQUIRE(back.ok());
  CHECK(back->Serialize() == plan.Serialize());
  CHECK(back->ToJson() == plan.ToJson());
  CHECK(back->buckets[1].compressor == "fp16");
  CHECK(back->buckets[1].slices[1].name == "t0");
  CHECK_THAT(plan.ToJson(), Catch::Contains("\"next_forward\""));
}

TEST_CASE("A bucket's form survives the round trip; plans of the version before read as flat") {
  const Profile p = MakeProfile({1, 1}, {1, 1}, {16, 16}, 0);
  CostModel cost = CostModel::Linear(1, 1);
  cost.channels[0].two_stage = LinearTerm{2e-6, 0.5e-12};
  Plan plan = TwoBucketPlan(p);
  plan.buckets[0].two_stage = true;
  REQUIRE(ValidatePlan(plan, p, cost).ok());
  const std::string bytes = plan.Serialize();
  auto back = Plan::Deserialize(bytes);
  REQUIRE(back.ok());
  CHECK(back->buckets[0].two_stage);
  CHECK_FALSE(back->buckets[1].two_stage);
  CHECK_THAT(plan.ToJson(), Catch::Contains("\"two_stage\": true"));
  // Version 1 (a checkpoint written before buckets had a form): no form byte after each ratio.
  std::string v1 = bytes;
  const uint32_t one = 1;
  std::memcpy(&v1[4], &one, sizeof(one));
  for (const double ratio : {0.5, 1.0}) {
    char pattern[sizeof(double)];
    std::memcpy(pattern, &ratio, sizeof(ratio));
    const size_t at = v1.find(std::string(pattern, sizeof(pattern)), 8);
    REQUIRE(at != std::string::npos);
    v1.erase(at + sizeof(double), 1);
  }
  auto old = Plan::Deserialize(v1);
  REQUIRE(old.ok());
  CHECK_FALSE(old->buckets[0].two_stage);
  CHECK(old->buckets[1].slices[1].name == "t0");
  CHECK(old->buckets[1].ratio == 0.5);
  // A form byte other than 0 or 1 is refused, naming it.
  std::string bad = bytes;
  char pattern[sizeof(double)];
  const double ratio = 1.0;
  std::memcpy(pattern, &ratio, sizeof(ratio));
  bad[bad.find(std::string(pattern, sizeof(pattern)), 8) + sizeof(double)] = 7;
  CHECK_THAT(std::string(Plan::Deserialize(bad).status().message()),
             Catch::Contains("two_stage"));
  // A channel that offers no two-stage form, and a collective that has none, are refused.
  CHECK_THAT(std::string(ValidatePlan(plan, p, CostModel::Linear(1, 1)).message()),
             Catch::Contains("bucket 0: two-stage on channel 0, which offers no two-stage"));
}

TEST_CASE("Deserialize rejects garbage without reading past the end") {
  const Profile p = MakeProfile({1, 1}, {1, 1}, {16, 16}, 0);
  const std::string bytes = TwoBucketPlan(p).Serialize();
  // Every truncation fails cleanly.
  for (size_t n = 0; n < bytes.size(); ++n) {
    CHECK_FALSE(Plan::Deserialize(bytes.substr(0, n)).ok());
  }
  CHECK_FALSE(Plan::Deserialize(bytes + "x").ok());
  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  CHECK_THAT(std::string(Plan::Deserialize(bad_magic).status().message()),
             Catch::Contains("magic"));
  // Random byte flips never crash; the ones that parse still satisfy the structural bounds.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string mutated = bytes;
    for (int k = 0; k < 3; ++k) {
      mutated[rng() % mutated.size()] = static_cast<char>(rng());
    }
    auto plan = Plan::Deserialize(mutated);
    if (!plan.ok()) {
      continue;
    }
    for (const Bucket& b : plan->buckets) {
      CHECK(b.lag <= b.delay);
      CHECK(b.phase < b.period);
    }
  }
}

TEST_CASE("ValidatePlan catches coverage, range and bound violations") {
  const Profile p = MakeProfile({1, 1}, {1, 1}, {16, 16}, 0);
  const CostModel cost = CostModel::Linear(1, 1);
  auto expect = [&](Plan plan, const char* text) {
    absl::Status s = ValidatePlan(plan, p, cost);
    INFO(text);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(std::string(s.message()), Catch::Contains(text));
  };
  Plan plan = TwoBucketPlan(p);
  plan.buckets[0].slices[0].count = 3;
  plan.buckets[0].bytes = 12;
  expect(plan, "covered twice");
  plan = TwoBucketPlan(p);
  plan.buckets.pop_back();
  expect(plan, "not covered");
  plan = TwoBucketPlan(p);
  plan.staleness = 0;
  expect(plan, "outside [0, staleness 0]");
  plan = TwoBucketPlan(p);
  plan.buckets[1].channel = 1;
  expect(plan, "channel 1 does not exist");
  plan = TwoBucketPlan(p);
  plan.buckets[1].bytes = 1;
  expect(plan, "slices hold 24");
  plan = TwoBucketPlan(p);
  plan.buckets[1].slices[1].name = "zz";
  expect(plan, "profile calls it 't0'");
  plan = TwoBucketPlan(p);
  plan.buckets[0].op = Collective::kAllgather;
  expect(plan, "no earlier reduce-scatter");
  plan = TwoBucketPlan(p);
  plan.buckets[1].ratio = 0;
  expect(plan, "ratio");
  plan = TwoBucketPlan(p);
  plan.buckets[1].lag = 2;
  expect(plan, "lag");
}

}  // namespace
}  // namespace overlap::sched
