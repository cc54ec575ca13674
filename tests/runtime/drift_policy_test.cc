// DriftPolicy: when a plan's measured step drifted enough to plan again. Windows are made the way
// the step profiler makes them (median and interquartile range of the last few steps), from step
// times drawn with a fixed seed, so every run sees the same numbers.
#include "runtime/plan/drift_policy.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

namespace overlap {
namespace {

constexpr int kProfileSteps = 5;  // OVERLAP_PROFILE_STEPS' default: steps in a window
constexpr int64_t kInterval = 12;
constexpr int64_t kConfirm = 6;

// Median and nearest-rank interquartile range, as StepProfiler::median_step_ms and
// step_ms_spread compute them.
StepWindow WindowOf(std::vector<double> steps) {
  std::sort(steps.begin(), steps.end());
  const size_t n = steps.size();
  const double median = n % 2 == 1 ? steps[n / 2] : (steps[n / 2 - 1] + steps[n / 2]) / 2;
  return {median, steps[(3 * n) / 4] - steps[n / 4]};
}

// Windows of kProfileSteps steps of `ms` plus uniform jitter in [-jitter, +jitter].
class Steps {
 public:
  explicit Steps(unsigned seed) : rng_(seed) {}
  StepWindow Window(double ms, double jitter) {
    std::uniform_real_distribution<double> noise(-jitter, jitter);
    std::vector<double> steps;
    for (int i = 0; i < kProfileSteps; ++i) steps.push_back(ms + noise(rng_));
    return WindowOf(steps);
  }

 private:
  std::mt19937 rng_;
};

// Runs `checks` agreed checks of one rank on windows from `window(i)`; returns the checks at
// which the policy dropped the plan (after each drop, a new plan is adopted as the runtime does).
template <typename WindowFn>
std::vector<int> Run(DriftPolicy* policy, int checks, WindowFn window) {
  std::vector<int> drops;
  policy->OnAdopted();
  for (int i = 0; i < checks; ++i) {
    const StepWindow now = window(i);
    if (policy->OnChecked(policy->Drifted(now), now)) {
      drops.push_back(i);
      policy->OnAdopted();
    }
  }
  return drops;
}

TEST_CASE("jitter on a short step never re-plans", "[drift]") {
  // The README's example on 2 cores: 1-4 ms steps. A rule of 25% alone finds a drift in a large
  // share of the windows; the policy finds none.
  Steps steps(20261202);
  std::vector<StepWindow> windows;
  for (int i = 0; i < 1000; ++i) windows.push_back(steps.Window(2.5, 1.5));
  int relative_only = 0;
  for (const StepWindow& w : windows) {
    if (std::abs(w.median_ms - windows[0].median_ms) > 0.25 * windows[0].median_ms) {
      ++relative_only;
    }
  }
  REQUIRE(relative_only > 200);

  DriftPolicy policy(0.25, 5, kInterval, kConfirm);
  CHECK(Run(&policy, 1000, [&](int i) { return windows[static_cast<size_t>(i)]; }).empty());

  // With no absolute floor, the spread alone keeps such jitter from re-planning but for rare
  // windows: fewer than 1 check in 100 ends in a drop.
  DriftPolicy no_floor(0.25, 0, kInterval, kConfirm);
  CHECK(Run(&no_floor, 1000, [&](int i) { return windows[static_cast<size_t>(i)]; }).size() < 10);
}

TEST_CASE("a lasting slow-down re-plans at its second check, not its first", "[drift]") {
  Steps steps(7);
  DriftPolicy policy(0.25, 5, kInterval, kConfirm);
  // 100 ms steps with 2 ms of jitter; from check 20 on, 150 ms.
  const std::vector<int> drops = Run(&policy, 22, [&](int i) {
    return steps.Window(i < 20 ? 100 : 150, 2);
  });
  REQUIRE(drops == std::vector<int>{21});
}

TEST_CASE("a single slow window is not a drift", "[drift]") {
  Steps steps(11);
  DriftPolicy policy(0.25, 5, kInterval, kConfirm);
  const std::vector<int> drops =
      Run(&policy, 40, [&](int i) { return steps.Window(i == 10 || i == 30 ? 200 : 100, 2); });
  CHECK(drops.empty());
}

TEST_CASE("a drift must be large in absolute terms", "[drift]") {
  Steps steps(3);
  DriftPolicy policy(0.25, 5, kInterval, kConfirm);
  // 10 ms to 14 ms is 40%, but 4 ms: below OVERLAP_REPLAN_MIN_MS.
  CHECK(Run(&policy, 30, [&](int i) { return steps.Window(i < 10 ? 10 : 14, 0.2); }).empty());
  // 10 ms to 16 ms is 6 ms: a drift.
  CHECK(Run(&policy, 30, [&](int i) { return steps.Window(i < 10 ? 10 : 16, 0.2); }) ==
        std::vector<int>{11});
}

TEST_CASE("a drift must stand out of the steps' spread", "[drift]") {
  DriftPolicy policy(0.25, 0, kInterval, kConfirm);
  policy.OnAdopted();
  REQUIRE_FALSE(policy.OnChecked(false, {100, 30}));  // the baseline: a spread of 30 ms
  CHECK_FALSE(policy.Drifted({150, 10}));             // 50 ms < 2 x 30 ms
  CHECK(policy.Drifted({170, 10}));                   // 70 ms > 60 ms and > 25 ms
  CHECK_FALSE(policy.Drifted({170, 40}));             // a noisier window now: 70 ms < 80 ms
  CHECK(policy.Drifted({30, 5}));                     // faster counts too
}

TEST_CASE("the first window under a plan is its baseline, never a drift", "[drift]") {
  DriftPolicy policy(0.25, 5, kInterval, kConfirm);
  policy.OnAdopted();
  CHECK_FALSE(policy.Drifted({500, 1}));
  REQUIRE_FALSE(policy.has_baseline());
  REQUIRE_FALSE(policy.OnChecked(false, {0, 0}));  // steps not steady: nothing to take
  REQUIRE_FALSE(policy.has_baseline());
  REQUIRE_FALSE(policy.OnChecked(false, {100, 1}));
  REQUIRE(policy.has_baseline());
  CHECK(policy.baseline().median_ms == 100);
  REQUIRE_FALSE(policy.OnChecked(false, {300, 1}));  // the baseline stays the first window
  CHECK(policy.baseline().median_ms == 100);
}

TEST_CASE("checks confirm a drift sooner, and back off after re-plans that did not pay",
          "[drift]") {
  DriftPolicy policy(0.25, 5, kInterval, kConfirm);
  policy.OnAdopted();
  CHECK(policy.NextCheckIn() == kInterval);
  REQUIRE_FALSE(policy.OnChecked(false, {100, 1}));
  REQUIRE_FALSE(policy.OnChecked(true, {200, 1}));
  CHECK(policy.NextCheckIn() == kConfirm);  // the confirming check, on fresh steps
  REQUIRE(policy.OnChecked(true, {200, 1}));

  policy.OnReplanned(false);  // the planner made the same plan: the drift did not pay
  CHECK(policy.NextCheckIn() == 2 * kInterval);
  policy.OnReplanned(false);
  CHECK(policy.NextCheckIn() == 4 * kInterval);
  for (int i = 0; i < 10; ++i) policy.OnReplanned(false);
  CHECK(policy.backoff() == DriftPolicy::kMaxBackoff);
  CHECK(policy.NextCheckIn() == DriftPolicy::kMaxBackoff * kInterval);
  policy.OnReplanned(true);  // a different plan: judged at its first check
  CHECK(policy.judging());
  policy.OnAdopted();
  REQUIRE_FALSE(policy.OnChecked(false, {100, 1}, 0));  // its step unmeasured: taken as paid
  CHECK(policy.NextCheckIn() == kInterval);
}

TEST_CASE("a changed re-plan that ran no faster backs the checks off; one that did does not",
          "[drift]") {
  DriftPolicy policy(0.25, 5, kInterval, kConfirm);
  // The dropped plan's wall step: 110 ms at its first check, 100 ms at the drift; a re-plan is
  // judged against the lower.
  auto drift = [&policy] {
    policy.OnAdopted();
    REQUIRE_FALSE(policy.OnChecked(false, {50, 1}, 110));
    REQUIRE_FALSE(policy.OnChecked(true, {80, 1}, 100));
    REQUIRE(policy.OnChecked(true, {80, 1}, 100));
    CHECK(policy.drifted_wall_ms() == 100);
    policy.OnAdopted();
  };
  drift();
  policy.OnReplanned(true);  // a different plan, judged at its first check
  CHECK(policy.judging());
  CHECK(policy.NextCheckIn() == kInterval);
  REQUIRE_FALSE(policy.OnChecked(false, {60, 1}, 97));  // 3 ms shorter: under 5 ms and 5%
  CHECK_FALSE(policy.judging());
  CHECK(policy.backoff() == 2);
  CHECK(policy.NextCheckIn() == 2 * kInterval);

  drift();
  policy.OnReplanned(true);
  REQUIRE_FALSE(policy.OnChecked(false, {60, 1}, 101));  // slower: did not pay
  CHECK(policy.backoff() == 4);

  drift();
  policy.OnReplanned(true);
  REQUIRE_FALSE(policy.OnChecked(false, {60, 1}, 90));  // 10 ms shorter: paid
  CHECK(policy.backoff() == 1);

  drift();
  policy.OnReplanned(false);  // the same plan: backed off at once, nothing to judge
  CHECK_FALSE(policy.judging());
  CHECK(policy.backoff() == 2);

  drift();
  policy.OnReplanned(true);
  REQUIRE_FALSE(policy.OnChecked(false, {60, 1}, 0));  // not measured: taken as paid
  CHECK(policy.backoff() == 1);

  // A slow spell: the plan ran 90 ms at its first check and 100 ms at the drift. A re-plan that
  // runs 92 ms gained nothing the spell's end would not have given: judged against 90 ms.
  policy.OnAdopted();
  REQUIRE_FALSE(policy.OnChecked(false, {50, 1}, 90));
  REQUIRE_FALSE(policy.OnChecked(true, {80, 1}, 100));
  REQUIRE(policy.OnChecked(true, {80, 1}, 100));
  CHECK(policy.drifted_wall_ms() == 90);
  policy.OnAdopted();
  policy.OnReplanned(true);
  REQUIRE_FALSE(policy.OnChecked(false, {60, 1}, 92));
  CHECK(policy.backoff() == 2);
}

TEST_CASE("OVERLAP_REPLAN_DRIFT=0 never finds a drift", "[drift]") {
  DriftPolicy policy(0, 0, kInterval, kConfirm);
  REQUIRE_FALSE(policy.enabled());
  policy.OnAdopted();
  policy.OnChecked(false, {10, 0});
  CHECK_FALSE(policy.Drifted({1000, 0}));
}

}  // namespace
}  // namespace overlap
