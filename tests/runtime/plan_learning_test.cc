// CycleDetector and MakeLaunchUnits: the pure logic that decides when and how ranks freeze a plan.
#include <catch2/catch.hpp>

#include "runtime/plan/cycle_detector.h"
#include "runtime/plan/launch_units.h"

namespace overlap {
namespace {

// Feeds `ids` and returns the last step learned, if any.
std::optional<LearnedStep> Feed(CycleDetector* d, const std::vector<int32_t>& ids,
                                std::optional<uint64_t> launches = 0) {
  std::optional<LearnedStep> last;
  for (int32_t id : ids) {
    std::optional<LearnedStep> step = d->Observe(id, 0, launches);
    if (step.has_value()) last = step;
  }
  return last;
}

TEST_CASE("a step is learned after the configured number of identical steps", "[detector]") {
  CycleDetector d(3);
  // Steps of {4, 2, 9}: the third step closes when 4 comes back a fourth time.
  CHECK_FALSE(Feed(&d, {4, 2, 9, 4, 2, 9, 4, 2, 9}).has_value());
  std::optional<LearnedStep> step = Feed(&d, {4});
  REQUIRE(step.has_value());
  CHECK(step->ids == std::vector<int32_t>{4, 2, 9});
  CHECK(step->launches_unchanged);
  CHECK(step->observed.size() == 3);
  // The step in progress is the one just begun.
  CHECK(d.current() == std::vector<int32_t>{4});
}

TEST_CASE("order inside a step may vary", "[detector]") {
  CycleDetector d(3);
  std::optional<LearnedStep> step = Feed(&d, {1, 2, 3, 1, 3, 2, 1, 2, 3, 1});
  REQUIRE(step.has_value());
  CHECK(step->ids == std::vector<int32_t>{1, 2, 3});  // the last step's order
}

TEST_CASE("only ids present in every one of the last steps are learned", "[detector]") {
  CycleDetector d(3);
  // Gradients 1, 2, 3 every step; a loss (9) every third step.
  std::optional<LearnedStep> step = Feed(&d, {1, 2, 3, 9, 1, 2, 3, 1, 2, 3, 1});
  REQUIRE(step.has_value());
  CHECK(step->ids == std::vector<int32_t>{1, 2, 3});
  // Fewer closed steps than needed teach nothing.
  CycleDetector e(3);
  CHECK_FALSE(Feed(&e, {1, 2, 3, 1, 2, 3, 1}).has_value());
}

TEST_CASE("a step may start anywhere; a name reduced twice per step is learned alone",
          "[detector]") {
  CycleDetector d(2);
  // The program's step is {1, 2, 3}; observation starts at 2.
  std::optional<LearnedStep> step = Feed(&d, {2, 3, 1, 2, 3, 1, 2});
  REQUIRE(step.has_value());
  CHECK(step->ids == std::vector<int32_t>{2, 3, 1});
  CHECK(d.current() == std::vector<int32_t>{2});
  // 1 is reduced twice per step: the "steps" alternate between {1, 2} and {1, 3}. Only 1 is in
  // all of them; a plan of 1 alone launches each of its submissions in order, which is safe.
  CycleDetector e(2);
  step = Feed(&e, {1, 2, 1, 3, 1, 2, 1, 3, 1});
  REQUIRE(step.has_value());
  CHECK(step->ids == std::vector<int32_t>{1});
}

TEST_CASE("zero steps needed disables learning", "[detector]") {
  CycleDetector d(0);
  CHECK_FALSE(Feed(&d, {1, 1, 1, 1, 1, 1}).has_value());
}

TEST_CASE("launches_unchanged compares the agreed launch counts across the repeated steps",
          "[detector]") {
  CycleDetector d(2);
  Feed(&d, {7}, 10);
  Feed(&d, {7}, 12);  // planned collectives ran during the first step
  std::optional<LearnedStep> step = Feed(&d, {7}, 12);
  REQUIRE(step.has_value());
  CHECK_FALSE(step->launches_unchanged);
  step = Feed(&d, {7}, 12);
  REQUIRE(step.has_value());
  CHECK(step->launches_unchanged);
  step = Feed(&d, {7}, std::nullopt);  // ranks disagreed in that round
  REQUIRE(step.has_value());
  CHECK_FALSE(step->launches_unchanged);
}

PlanEntry Entry(int64_t floats) {
  auto response = std::make_shared<Response>();
  response->request.tensors.push_back(TensorMeta{DataType::kFloat32, {floats}});
  return PlanEntry{0, response};
}

TEST_CASE("launch units: a small first unit, then units up to the cap, big tensors alone",
          "[units]") {
  // Bytes: 400, 400, 400, 4000, 400, 400.
  std::vector<PlanEntry> entries = {Entry(100),  Entry(100), Entry(100),
                                    Entry(1000), Entry(100), Entry(100)};
  const std::vector<int64_t> one(6, 0);
  const std::vector<std::vector<int>> units = MakeLaunchUnits(entries, one, one, 0, 800, 1200);
  CHECK(units == std::vector<std::vector<int>>{{0, 1}, {2}, {3}, {4, 5}});
  CHECK(MakeLaunchUnits({}, {}, {}, 0, 800, 1200).empty());
  CHECK(MakeLaunchUnits({Entry(1000)}, {0}, {0}, 0, 8, 12) == std::vector<std::vector<int>>{{0}});
}

TEST_CASE("launch units end with their round once they hold the minimum", "[units]") {
  // Bytes 400 each; rounds 0, 1, 1, 2, 3, 3; one segment. Minimum 800: {0, 1, 2} (400 after
  // round 0 is below it; 1200 after round 1 is not), then {3, 4, 5}.
  std::vector<PlanEntry> entries(6, Entry(100));
  const std::vector<int64_t> segment(6, 0);
  CHECK(MakeLaunchUnits(entries, segment, {0, 1, 1, 2, 3, 3}, 800, 1 << 20, 1 << 20) ==
        std::vector<std::vector<int>>{{0, 1, 2}, {3, 4, 5}});
  // Minimum 0: a unit per round, as negotiation agreed them.
  CHECK(MakeLaunchUnits(entries, segment, {0, 1, 1, 2, 3, 3}, 0, 1 << 20, 1 << 20) ==
        std::vector<std::vector<int>>{{0}, {1, 2}, {3}, {4, 5}});
}

TEST_CASE("launch units never span two segments", "[units]") {
  // A program that waits for each tensor before submitting the next puts each in a segment of
  // its own; a unit holding two of them would wait forever for the second.
  // Whatever the minimum and the rounds.
  std::vector<PlanEntry> entries = {Entry(1), Entry(1), Entry(1), Entry(1)};
  CHECK(MakeLaunchUnits(entries, {5, 6, 6, 9}, {0, 0, 0, 0}, 800, 1200, 1200) ==
        std::vector<std::vector<int>>{{0}, {1, 2}, {3}});
}

TEST_CASE("the learned step carries each id's observation count, a joined rank's the one before",
          "[detector]") {
  CycleDetector d(2);
  std::optional<LearnedStep> learned;
  for (int step = 0; step < 3; ++step) {
    const uint64_t base = 10 * static_cast<uint64_t>(step);
    // Ids 1 and 2 are submitted before a wait, 3 after it; 4 was agreed while this rank had
    // joined (it submitted nothing).
    for (auto [id, observed] : std::vector<std::pair<int32_t, std::optional<uint64_t>>>{
             {1, base}, {2, base}, {3, base + 1}, {4, std::nullopt}}) {
      std::optional<LearnedStep> s = d.Observe(id, observed, 0);
      if (s.has_value()) learned = s;
    }
  }
  REQUIRE(learned.has_value());
  CHECK(learned->ids == std::vector<int32_t>{1, 2, 3, 4});
  CHECK(learned->observed == std::vector<uint64_t>{10, 10, 11, 11});  // the last closed step
  CHECK(learned->rounds.size() == 4);
}

}  // namespace
}  // namespace overlap
