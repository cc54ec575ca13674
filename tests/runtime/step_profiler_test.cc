// StepProfiler: step markers and per-tensor submit / first-wait times in, median Profile out.
// Every time is synthetic (milliseconds from the Unix epoch), so every value is exact.
#include "runtime/plan/step_profiler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace overlap {
namespace {

absl::Time At(double ms) { return absl::UnixEpoch() + absl::Milliseconds(ms); }

// What a handle's WaitClock (first_wait(), done_at()) would return; the test sets them when the
// "program" waits. By default the operation completed long before any wait, which then does not
// block.
struct FakeHandle {
  absl::Time first_wait = absl::InfiniteFuture();
  absl::Time done = absl::InfinitePast();
};

std::shared_ptr<FakeHandle> Submit(StepProfiler* p, const std::string& name, double at_ms,
                                   int64_t bytes = 64, bool may_delay = true) {
  auto handle = std::make_shared<FakeHandle>();
  p->OnSubmit(
      name, bytes, DataType::kFloat32,
      [handle] {
        return StepProfiler::WaitTimes{handle->first_wait, handle->done};
      },
      At(at_ms), may_delay);
  return handle;
}

struct TensorSpec {
  std::string name;
  double ready_ms;                     // submitted this long after backward starts
  std::optional<double> first_use_ms;  // waited this long after the next forward starts
  int64_t bytes = 64;
};

// Drives whole steps: forward, backward (with the submissions), update, back to back in time.
class Driver {
 public:
  explicit Driver(StepProfiler* p, double start_ms = 1000) : p_(p), now_(start_ms) {}

  // Marks one step and returns its number. The tensors' waits are placed in the next step's
  // forward, which starts when this step's update ends.
  int64_t Step(double forward, double backward, double update,
               const std::vector<TensorSpec>& tensors) {
    const int64_t step = p_->OnPhase(StepPhase::kForward, At(now_));
    p_->OnPhase(StepPhase::kBackward, At(now_ + forward));
    const double next_forward = now_ + forward + backward + update;
    for (const TensorSpec& t : tensors) {
      auto handle = Submit(p_, t.name, now_ + forward + t.ready_ms, t.bytes);
      if (t.first_use_ms) handle->first_wait = At(next_forward + *t.first_use_ms);
    }
    p_->OnPhase(StepPhase::kUpdate, At(now_ + forward + backward));
    now_ = next_forward;
    return step;
  }

  double now() const { return now_; }

 private:
  StepProfiler* p_;
  double now_;
};

std::vector<std::string> Names(const sched::Profile& p, const sched::LayerInfo& layer) {
  std::vector<std::string> names;
  for (int i : layer.tensors) names.push_back(p.tensors[static_cast<size_t>(i)].name);
  return names;
}

TEST_CASE("one step: phases, clamped ready and first-use times, layers", "[step_profiler]") {
  StepProfiler p(1);
  CHECK_FALSE(p.used());
  CHECK(p.OnPhase(StepPhase::kForward, At(0)) == 1);
  CHECK(p.used());
  auto early = Submit(&p, "early", 5);  // before backward: ready at 0
  auto slow = Submit(&p, "slow", 6);
  CHECK(p.OnPhase(StepPhase::kBackward, At(10)) == 1);
  auto mid2 = Submit(&p, "mid2", 18);
  auto mid = Submit(&p, "mid", 22);
  auto mid_again = Submit(&p, "mid", 25);  // a second submission keeps the first
  CHECK(p.OnPhase(StepPhase::kUpdate, At(30)) == 1);
  auto late = Submit(&p, "late", 40);  // after update: ready at backward_ms (20)
  p.OnSubmit("unwatched", 64, DataType::kFloat32, nullptr, At(12));  // never waited

  late->first_wait = At(20);  // before the next forward: first use at 0
  mid->first_wait = At(49);
  mid2->first_wait = At(49);
  mid_again->first_wait = At(35);  // ignored with its submission
  slow->first_wait = At(100);      // after the next backward marker: end of forward
  // early is never waited: end of forward.

  CHECK(p.OnPhase(StepPhase::kForward, At(45)) == 2);  // update_ms 15
  CHECK(p.steady_steps() == 0);
  CHECK(p.step_bytes() == 0);  // no step closed yet
  absl::StatusOr<sched::Profile> none = p.MakeProfile("m");
  CHECK(none.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(p.OnPhase(StepPhase::kBackward, At(55)) == 2);  // closes step 1; forward_ms 10
  CHECK(p.steady_steps() == 1);
  CHECK(p.median_step_ms() == 10 + 20 + 15);
  // Six tensors of 64 bytes, "mid" counted once: the largest bucket a plan of this step makes.
  CHECK(p.step_bytes() == 6 * 64);

  absl::StatusOr<sched::Profile> profile = p.MakeProfile("m");
  REQUIRE(profile.ok());
  CHECK(profile->model == "m");
  CHECK(profile->forward_ms == 10);
  CHECK(profile->backward_ms == 20);
  CHECK(profile->update_ms == 15);
  CHECK(profile->total_bytes == 6 * int64_t{64});
  // First uses: late 0; mid2, mid 4; early, slow, unwatched 10 (the end of forward).
  // Ready: late 20; mid 12, mid2 8; early 0, slow 0, unwatched 2.
  REQUIRE(profile->layers.size() == 3);
  CHECK(Names(*profile, profile->layers[0]) == std::vector<std::string>{"late"});
  CHECK(Names(*profile, profile->layers[1]) == std::vector<std::string>{"mid2", "mid"});
  CHECK(Names(*profile, profile->layers[2]) ==
        std::vector<std::string>{"early", "slow", "unwatched"});
  CHECK(profile->layers[0].forward_ms == 4);
  CHECK(profile->layers[1].forward_ms == 6);
  CHECK(profile->layers[2].forward_ms == 0);
  CHECK(profile->layers[0].backward_ms == 8);
  CHECK(profile->layers[1].backward_ms == 10);
  CHECK(profile->layers[2].backward_ms == 2);
  for (const sched::TensorInfo& t : profile->tensors) {
    INFO(t.name);
    if (t.name == "late") {
      CHECK(t.ready_ms == 20);
      CHECK(t.first_use_ms == 0);
    } else if (t.name == "mid" || t.name == "mid2") {
      CHECK(t.ready_ms == 12);
      CHECK(t.first_use_ms == 4);
    } else {
      CHECK(t.ready_ms == 2);
      CHECK(t.first_use_ms == 10);
    }
  }
}

// One step of a program with a metric reduced in the forward and batch-norm statistics in the
// backward, each waited on at once; `marked` says whether its gradient says so (may_delay).
std::vector<std::string> ProfiledNames(bool marked) {
  StepProfiler p(1);
  p.OnPhase(StepPhase::kForward, At(0));
  auto metric = Submit(&p, "metric", 2, 64, false);
  metric->first_wait = At(3);
  p.OnPhase(StepPhase::kBackward, At(10));
  auto gradient = Submit(&p, "gradient", 15, 64, marked);
  auto stats = Submit(&p, "stats", 16, 64, false);
  stats->first_wait = At(17);
  p.OnPhase(StepPhase::kUpdate, At(30));
  gradient->first_wait = At(50);
  p.OnPhase(StepPhase::kForward, At(45));
  p.OnPhase(StepPhase::kBackward, At(55));
  absl::StatusOr<sched::Profile> profile = p.MakeProfile("m");
  REQUIRE(profile.ok());
  std::vector<std::string> names;
  for (const sched::TensorInfo& t : profile->tensors) {
    names.push_back(t.name);
    CHECK(t.may_delay == (t.name == "gradient" && marked));
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST_CASE("a step that marks its gradients is profiled over those alone", "[step_profiler]") {
  CHECK(ProfiledNames(true) == std::vector<std::string>{"gradient"});
  CHECK(ProfiledNames(false) == std::vector<std::string>{"gradient", "metric", "stats"});
}

TEST_CASE("a gradient whose optimizer looks ahead says so in the profile", "[step_profiler]") {
  StepProfiler p(1);
  p.OnPhase(StepPhase::kForward, At(0));
  p.OnPhase(StepPhase::kBackward, At(10));
  auto noop = [] { return StepProfiler::WaitTimes{absl::InfiniteFuture(), absl::InfinitePast()}; };
  p.OnSubmit("ahead", 64, DataType::kFloat32, noop, At(12), true, false, /*looks_ahead=*/true);
  p.OnSubmit("predicted", 64, DataType::kFloat32, noop, At(14), true, false, false);
  p.OnPhase(StepPhase::kUpdate, At(20));
  p.OnPhase(StepPhase::kForward, At(25));
  p.OnPhase(StepPhase::kBackward, At(35));
  absl::StatusOr<sched::Profile> profile = p.MakeProfile("m");
  REQUIRE(profile.ok());
  REQUIRE(profile->tensors.size() == 2);
  for (const sched::TensorInfo& t : profile->tensors) {
    INFO(t.name);
    CHECK(t.looks_ahead == (t.name == "ahead"));
  }
}

TEST_CASE("the optimizer time a program notes is its step's, wherever it ran", "[step_profiler]") {
  auto noop = [] { return StepProfiler::WaitTimes{absl::InfiniteFuture(), absl::InfinitePast()}; };
  for (bool at_forward : {false, true}) {
    INFO("updates at forward: " << at_forward);
    StepProfiler p(2);
    double t = 0;
    for (int step = 0; step < 4; ++step) {
      p.OnPhase(StepPhase::kForward, At(t));
      // Updates at forward: the previous step's update runs in this forward, in two layers.
      if (at_forward && step > 0) {
        p.OnUpdateTime(1.5);
        p.OnUpdateTime(2.5);
      }
      p.OnPhase(StepPhase::kBackward, At(t + 10));
      p.OnSubmit("g", 64, DataType::kFloat32, noop, At(t + 12));
      p.OnPhase(StepPhase::kUpdate, At(t + 20));
      if (!at_forward) p.OnUpdateTime(4);
      t += 25;
    }
    absl::StatusOr<sched::Profile> profile = p.MakeProfile("m");
    REQUIRE(profile.ok());
    CHECK(profile->optimizer_ms == Approx(4));
  }
  // A program that notes nothing leaves it 0 (update_ms prices look-ahead then).
  StepProfiler quiet(1);
  Driver d(&quiet);
  d.Step(10, 20, 5, {{"a", 5, 3}});
  d.Step(10, 20, 5, {});
  CHECK(quiet.MakeProfile("m")->optimizer_ms == 0);
}

TEST_CASE("forward time before the first use and backward time after the last gradient",
          "[step_profiler]") {
  StepProfiler p(1);
  Driver d(&p);
  // Both tensors used 3 ms into a 10 ms forward, ready 5 ms into a 20 ms backward.
  d.Step(10, 20, 5, {{"a", 5, 3}, {"b", 5, 3}});
  d.Step(10, 20, 5, {});
  absl::StatusOr<sched::Profile> profile = p.MakeProfile("lead");
  REQUIRE(profile.ok());
  REQUIRE(profile->layers.size() == 2);
  CHECK(profile->layers[0].tensors.empty());
  CHECK(profile->layers[0].forward_ms == 3);
  CHECK(profile->layers[0].backward_ms == 15);
  CHECK(Names(*profile, profile->layers[1]) == std::vector<std::string>{"a", "b"});
  CHECK(profile->layers[1].forward_ms == 7);
  CHECK(profile->layers[1].backward_ms == 5);
  CHECK(profile->compute_ms() == 35);
}

TEST_CASE("time blocked in a forward wait is not compute", "[step_profiler]") {
  StepProfiler p(1);
  CHECK(p.OnPhase(StepPhase::kForward, At(0)) == 1);
  CHECK(p.OnPhase(StepPhase::kBackward, At(10)) == 1);
  auto l2 = Submit(&p, "l2", 15);  // the second layer's gradient comes first
  auto l1 = Submit(&p, "l1", 28);
  CHECK(p.OnPhase(StepPhase::kUpdate, At(30)) == 1);
  CHECK(p.OnPhase(StepPhase::kForward, At(35)) == 2);
  // Step 2's forward: 2 ms of compute, then blocked 30 ms in l1's wait (37 to 67), 4 ms of
  // layer 1, l2's wait (done at 50: no block), 6 ms of layer 2.
  l1->first_wait = At(37);
  l1->done = At(67);
  l2->first_wait = At(71);
  l2->done = At(50);
  CHECK(p.OnPhase(StepPhase::kBackward, At(77)) == 2);  // raw forward 42 ms
  REQUIRE(p.steady_steps() == 1);
  CHECK(p.median_step_ms() == 12 + 20 + 5);
  // The wall step keeps the 30 ms blocked: backward at 10 to the next backward at 77.
  CHECK(p.median_wall_ms() == 67);
  absl::StatusOr<sched::Profile> profile = p.MakeProfile("m");
  REQUIRE(profile.ok());
  CHECK(profile->forward_ms == 12);
  CHECK(profile->backward_ms == 20);
  CHECK(profile->update_ms == 5);
  REQUIRE(profile->tensors.size() == 2);
  // In forward order.
  CHECK(profile->tensors[0].name == "l1");
  CHECK(profile->tensors[0].ready_ms == 18);
  CHECK(profile->tensors[0].first_use_ms == 2);
  CHECK(profile->tensors[1].name == "l2");
  CHECK(profile->tensors[1].ready_ms == 5);
  CHECK(profile->tensors[1].first_use_ms == 6);  // 36 ms after the forward's start, 30 blocked
  REQUIRE(profile->layers.size() == 3);
  CHECK(profile->layers[0].tensors.empty());
  CHECK(profile->layers[0].forward_ms == 2);
  CHECK(Names(*profile, profile->layers[1]) == std::vector<std::string>{"l1"});
  CHECK(profile->layers[1].forward_ms == 4);
  CHECK(Names(*profile, profile->layers[2]) == std::vector<std::string>{"l2"});
  CHECK(profile->layers[2].forward_ms == 6);
}

TEST_CASE("time blocked waiting for every gradient before the update is not compute",
          "[step_profiler]") {
  StepProfiler p(1);
  CHECK(p.OnPhase(StepPhase::kForward, At(0)) == 1);
  CHECK(p.OnPhase(StepPhase::kBackward, At(10)) == 1);
  auto a = Submit(&p, "a", 15);
  auto b = Submit(&p, "b", 25);
  CHECK(p.OnPhase(StepPhase::kUpdate, At(30)) == 1);
  // The program waits for everything: a from 31 to 60, b from 60 to 81 (50 ms blocked), then
  // 4 ms of optimizer step and 1 ms of other work in the 55 ms update window.
  a->first_wait = At(31);
  a->done = At(60);
  b->first_wait = At(60);
  b->done = At(81);
  CHECK(p.OnPhase(StepPhase::kForward, At(85)) == 2);
  CHECK(p.OnPhase(StepPhase::kBackward, At(95)) == 2);
  REQUIRE(p.steady_steps() == 1);
  CHECK(p.median_step_ms() == 10 + 20 + 5);
  absl::StatusOr<sched::Profile> profile = p.MakeProfile("m");
  REQUIRE(profile.ok());
  CHECK(profile->forward_ms == 10);
  CHECK(profile->backward_ms == 20);
  CHECK(profile->update_ms == 5);
  REQUIRE(profile->tensors.size() == 2);
  CHECK(profile->tensors[0].first_use_ms == 0);  // waited before the forward
  CHECK(profile->tensors[1].first_use_ms == 0);
}

TEST_CASE("blocked time is clipped to each window and to the step's close", "[step_profiler]") {
  StepProfiler p(1);
  CHECK(p.OnPhase(StepPhase::kForward, At(0)) == 1);
  CHECK(p.OnPhase(StepPhase::kBackward, At(10)) == 1);
  auto a = Submit(&p, "a", 12);
  auto b = Submit(&p, "b", 14);
  auto c = Submit(&p, "c", 16);
  // a blocks 26 to 34: 4 ms in the backward (10 to 30), 4 in the update (30 to 40).
  a->first_wait = At(26);
  a->done = At(34);
  CHECK(p.OnPhase(StepPhase::kUpdate, At(30)) == 1);
  // b blocks 38 to 45: 2 ms in the update, 5 in step 2's forward (40 to 60).
  b->first_wait = At(38);
  b->done = At(45);
  CHECK(p.OnPhase(StepPhase::kForward, At(40)) == 2);
  // c is first waited at 50 and not done when the step closes at 60: 10 ms blocked.
  c->first_wait = At(50);
  c->done = absl::InfiniteFuture();
  CHECK(p.OnPhase(StepPhase::kBackward, At(60)) == 2);
  REQUIRE(p.steady_steps() == 1);
  absl::StatusOr<sched::Profile> profile = p.MakeProfile("m");
  REQUIRE(profile.ok());
  CHECK(profile->backward_ms == 16);
  CHECK(profile->update_ms == 4);
  CHECK(profile->forward_ms == 5);
  REQUIRE(profile->tensors.size() == 3);
  CHECK(profile->tensors[0].first_use_ms == 0);  // a: before the forward
  CHECK(profile->tensors[1].first_use_ms == 0);  // b: before the forward
  CHECK(profile->tensors[2].first_use_ms == 5);  // c: 10 ms in, 5 of them blocked in b's wait
  CHECK(profile->tensors[2].ready_ms == 6);
}

TEST_CASE("medians over the last steady steps ignore one outlier", "[step_profiler]") {
  StepProfiler p(5);
  Driver d(&p);
  // Step k's measurement takes step k+1's forward: forwards 9, 10, 11, 40 (outlier), 10.
  struct Spec {
    double forward, backward, update, ready_a, use_a, ready_b;
  };
  const std::vector<Spec> steps = {
      {99, 20, 5, 12, 2, 4},    // step 1's own forward is not measured
      {9, 22, 4, 14, 3, 3},     //
      {10, 90, 30, 80, 9, 70},  // outlier in backward, update and times
      {11, 18, 6, 10, 1, 5},    //
      {40, 21, 5, 13, 2, 4},    //
      {10, 0, 0, 0, 0, 0},      // closes step 5 at its backward marker
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    const Spec& s = steps[i];
    INFO("step " << i + 1);
    CHECK(p.steady_steps() == static_cast<int>(i == 0 ? 0 : i - 1));
    if (i == 4) {
      absl::StatusOr<sched::Profile> early = p.MakeProfile("vgg");
      CHECK(early.status().code() == absl::StatusCode::kFailedPrecondition);
      CHECK(std::string(early.status().message()) ==
            "step profile 'vgg': 3 steady steps measured, 5 needed");
    }
    // The last step's submissions are never closed; give it none.
    std::vector<TensorSpec> tensors;
    if (i + 1 < steps.size()) tensors = {{"a", s.ready_a, s.use_a}, {"b", s.ready_b, 8}};
    CHECK(d.Step(s.forward, s.backward, s.update, tensors) == static_cast<int64_t>(i + 1));
  }
  CHECK(p.steady_steps() == 5);
  // Steps 1..5 measured: forward (9, 10, 11, 40, 10) -> 10; backward (20, 22, 90, 18, 21) -> 21;
  // update (5, 4, 30, 6, 5) -> 5; a ready (12, 14, 80, 10, 13) -> 13, first use (2, 3, 9, 1, 2)
  // -> 2; b ready (4, 3, 70, 5, 4) -> 4, first use 8 every step.
  // Step totals: 34, 36, 131, 64, 36 -> 36.
  CHECK(p.median_step_ms() == 36);
  absl::StatusOr<sched::Profile> profile = p.MakeProfile("vgg");
  REQUIRE(profile.ok());
  CHECK(profile->forward_ms == 10);
  CHECK(profile->backward_ms == 21);
  CHECK(profile->update_ms == 5);
  REQUIRE(profile->tensors.size() == 2);
  CHECK(profile->tensors[0].name == "a");
  CHECK(profile->tensors[0].first_use_ms == 2);
  CHECK(profile->tensors[0].ready_ms == 13);
  CHECK(profile->tensors[1].name == "b");
  CHECK(profile->tensors[1].first_use_ms == 8);
  CHECK(profile->tensors[1].ready_ms == 4);
  // Leading layer (2 ms of forward, 8 of backward), a's layer, b's layer.
  REQUIRE(profile->layers.size() == 3);
  CHECK(profile->layers[0].forward_ms == 2);
  CHECK(profile->layers[0].backward_ms == 8);
  CHECK(profile->layers[1].forward_ms == 6);
  CHECK(profile->layers[1].backward_ms == 9);
  CHECK(profile->layers[2].forward_ms == 2);
  CHECK(profile->layers[2].backward_ms == 4);
}

TEST_CASE("a first use is clamped to the next forward's length", "[step_profiler]") {
  StepProfiler p(1);
  Driver d(&p);
  d.Step(10, 20, 5, {{"a", 3, 7}});
  d.Step(4, 20, 5, {});  // a was waited 7 ms into a 4 ms forward
  absl::StatusOr<sched::Profile> profile = p.MakeProfile("m");
  REQUIRE(profile.ok());
  CHECK(profile->forward_ms == 4);
  CHECK(profile->tensors[0].first_use_ms == 4);
}

TEST_CASE("only the newest steps_needed steps count", "[step_profiler]") {
  StepProfiler p(3);
  Driver d(&p);
  for (int i = 0; i < 4; ++i) d.Step(10, 50, 5, {{"a", 1, 1}});
  for (int i = 0; i < 4; ++i) d.Step(10, 20, 5, {{"a", 1, 1}});
  // Seven closed steps: 50, 50, 50, 50, 20, 20, 20 ms of backward; the last three count.
  CHECK(p.steady_steps() == 3);
  CHECK(p.median_step_ms() == 35);
  absl::StatusOr<sched::Profile> profile = p.MakeProfile("m");
  REQUIRE(profile.ok());
  CHECK(profile->backward_ms == 20);
}

TEST_CASE("tensors come in the newest step's submission order", "[step_profiler]") {
  StepProfiler p(2);
  Driver d(&p);
  // Same first use, so one layer, listed in submission order.
  d.Step(10, 20, 5, {{"x", 1, 5}, {"y", 2, 5}, {"z", 3, 5}});
  d.Step(10, 20, 5, {{"z", 1, 5}, {"x", 2, 5}, {"y", 3, 5}});
  d.Step(10, 20, 5, {});
  absl::StatusOr<sched::Profile> profile = p.MakeProfile("m");
  REQUIRE(profile.ok());
  REQUIRE(profile->layers.size() == 2);
  CHECK(Names(*profile, profile->layers[1]) == std::vector<std::string>{"z", "x", "y"});
  // Each tensor's median follows it across the reordering: x (1, 2), y (2, 3), z (3, 1); the
  // layer's gradients are ready at the latest of them, y's 2.5.
  CHECK(profile->layers[1].backward_ms == 2.5);
  CHECK(profile->layers[0].backward_ms == 17.5);
}

TEST_CASE("a changed tensor set restarts the steady count", "[step_profiler]") {
  StepProfiler p(3);
  Driver d(&p);
  const std::vector<TensorSpec> ab = {{"a", 1, 1}, {"b", 2, 2}};
  d.Step(10, 20, 5, ab);
  d.Step(10, 20, 5, ab);
  d.Step(10, 20, 5, ab);  // closes step 2
  CHECK(p.steady_steps() == 2);
  d.Step(10, 20, 5, {{"a", 1, 1}, {"c", 2, 2}});  // closes step 3 (a, b)
  CHECK(p.steady_steps() == 3);
  d.Step(10, 20, 5, ab);  // closes step 4 (a, c): a new run
  CHECK(p.steady_steps() == 1);
  d.Step(10, 20, 5, {{"a", 1, 1}, {"b", 2, 2, 128}});  // closes step 5 (a, b): new again
  CHECK(p.steady_steps() == 1);
  d.Step(10, 20, 5, {{"a", 1, 1}, {"b", 2, 2, 128}});  // closes step 6 (a, b of 128 bytes)
  CHECK(p.steady_steps() == 1);
  d.Step(10, 20, 5, {{"b", 2, 2, 128}, {"a", 1, 1}});  // order within a step does not matter
  CHECK(p.steady_steps() == 2);
  CHECK(p.MakeProfile("m").status().code() == absl::StatusCode::kFailedPrecondition);
  d.Step(10, 20, 5, {});
  CHECK(p.steady_steps() == 3);
  absl::StatusOr<sched::Profile> profile = p.MakeProfile("m");
  REQUIRE(profile.ok());
  CHECK(profile->total_bytes == 64 + 128);
}

TEST_CASE("out-of-order markers leave steps unmeasured and break the run", "[step_profiler]") {
  StepProfiler p(2);
  // Markers and submissions before the first forward belong to no step.
  CHECK(p.OnPhase(StepPhase::kBackward, At(0)) == 0);
  CHECK(p.OnPhase(StepPhase::kUpdate, At(1)) == 0);
  CHECK(p.used());
  Submit(&p, "a", 2);

  Driver d(&p);
  d.Step(10, 20, 5, {{"a", 1, 1}});
  d.Step(10, 20, 5, {{"a", 1, 1}});
  d.Step(10, 20, 5, {{"a", 1, 1}});
  CHECK(p.steady_steps() == 2);

  SECTION("update before backward: this step and the one it would have closed") {
    const double t = d.now();
    CHECK(p.OnPhase(StepPhase::kForward, At(t)) == 4);
    CHECK(p.OnPhase(StepPhase::kUpdate, At(t + 10)) == 4);
    CHECK(p.steady_steps() == 0);
    CHECK(p.OnPhase(StepPhase::kBackward, At(t + 20)) == 4);  // closes nothing
    CHECK(p.steady_steps() == 0);
  }
  SECTION("a second backward after the step before has closed") {
    const double t = d.now();
    CHECK(p.OnPhase(StepPhase::kForward, At(t)) == 4);
    CHECK(p.OnPhase(StepPhase::kBackward, At(t + 10)) == 4);  // closes step 3
    CHECK(p.OnPhase(StepPhase::kBackward, At(t + 20)) == 4);
    CHECK(p.steady_steps() == 0);
    CHECK(p.OnPhase(StepPhase::kUpdate, At(t + 30)) == 4);
  }
  SECTION("a missing update") {
    const double t = d.now();
    CHECK(p.OnPhase(StepPhase::kForward, At(t)) == 4);
    CHECK(p.OnPhase(StepPhase::kBackward, At(t + 10)) == 4);
    CHECK(p.steady_steps() == 2);
  }
  SECTION("a missing backward") {
    const double t = d.now();
    CHECK(p.OnPhase(StepPhase::kForward, At(t)) == 4);
  }
  // Step 4 is unmeasured either way; steps 5 and 6 form the new run, closed by step 7.
  Driver after(&p, d.now() + 100);
  CHECK(after.Step(10, 20, 5, {{"a", 1, 1}}) == 5);
  CHECK(p.steady_steps() == 0);
  after.Step(10, 30, 5, {{"a", 1, 1}});
  CHECK(p.steady_steps() == 1);
  after.Step(10, 40, 5, {});
  CHECK(p.steady_steps() == 2);
  absl::StatusOr<sched::Profile> profile = p.MakeProfile("m");
  REQUIRE(profile.ok());
  CHECK(profile->backward_ms == 25);  // steps 5 and 6: (20 + 30) / 2
}

TEST_CASE("Reset forgets closed steps", "[step_profiler]") {
  StepProfiler p(2);
  Driver d(&p);
  for (int i = 0; i < 3; ++i) d.Step(10, 20, 5, {{"a", 1, 1}});
  CHECK(p.steady_steps() == 2);
  CHECK(p.MakeProfile("m").ok());
  p.Reset();
  CHECK(p.steady_steps() == 0);
  CHECK(p.median_step_ms() == 0);
  CHECK(p.MakeProfile("m").status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(p.used());
  d.Step(10, 20, 5, {{"a", 1, 1}});  // closes step 3, which was still open
  CHECK(p.steady_steps() == 1);
}

TEST_CASE("steps_needed below 1 counts as 1", "[step_profiler]") {
  StepProfiler p(0);
  Driver d(&p);
  d.Step(10, 20, 5, {{"a", 1, 1}});
  d.Step(10, 20, 5, {});
  CHECK(p.steady_steps() == 1);
  CHECK(p.MakeProfile("m").ok());
}

TEST_CASE("a step without tensors gives ProfileFromMeasurements' error", "[step_profiler]") {
  StepProfiler p(1);
  Driver d(&p);
  d.Step(10, 20, 5, {});
  d.Step(10, 20, 5, {});
  CHECK(p.steady_steps() == 1);
  CHECK(p.MakeProfile("m").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the spread of the steady steps is their interquartile range", "[step_profiler]") {
  StepProfiler p(5);
  CHECK(p.step_ms_spread() == 0);
  // Steps of 10, 40, 20, 30 and 50 ms (backward marker to the next backward marker, with 1 ms of
  // forward and update each), every one submitting the same tensor.
  const double lengths[] = {10, 40, 20, 30, 50};
  double t = 0;
  CHECK(p.OnPhase(StepPhase::kForward, At(t)) == 1);
  for (int i = 0; i <= 5; ++i) {
    const double ms = i < 5 ? lengths[i] : 10;
    CHECK(p.OnPhase(StepPhase::kBackward, At(t + 1)) == i + 1);
    auto g = Submit(&p, "g", t + 2);
    g->first_wait = At(t + ms + 1);
    CHECK(p.OnPhase(StepPhase::kUpdate, At(t + ms - 1)) == i + 1);
    t += ms;
    CHECK(p.OnPhase(StepPhase::kForward, At(t)) == i + 2);
  }
  REQUIRE(p.steady_steps() == 5);
  CHECK(p.median_step_ms() == 30);
  CHECK(p.step_ms_spread() == 40 - 20);  // sorted 10 20 30 40 50: [3] - [1]
}

}  // namespace
}  // namespace overlap
