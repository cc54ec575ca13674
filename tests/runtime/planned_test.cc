// Planned execution (runtime/planes/planned_mode.h): after OVERLAP_PLAN_AFTER_STEPS identical steps
// the ranks freeze a plan and stop negotiating; results must stay exact, and every way of leaving
// the plan (a diverged request, a skipped tensor, Join, a new set of tensors) must keep the job
// correct and moving. Runs with OVERLAP_PLAN_AFTER_STEPS=3 and a 1 s / 3 s stall warning/timeout.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);
// The plan freezes after OVERLAP_PLAN_AFTER_STEPS=3 identical steps, but how ids fall into rounds
// depends on timing, so on a loaded machine the first steps may not repeat and freezing comes a
// few steps later. The tests run kSteps steps and require the last ones, from kQuietFrom on, to
// run on the plan with no operation negotiated. (A loaded rank may still cause a negotiation
// round: a plan's liveness probe, which agrees nothing.)
constexpr int kSteps = 18;
constexpr int kQuietFrom = 11;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Rank r contributes r + step + (i % 7) at element i; the sum over ranks is exact in float.
float Value(int rank, int step, size_t i) {
  return static_cast<float>(rank + step + static_cast<int>(i % 7));
}
float Expected(int step, size_t i, int contributors) {
  return static_cast<float>(contributors * (contributors - 1) / 2 +
                            contributors * (step + static_cast<int>(i % 7)));
}

struct Grad {
  std::string name;
  std::vector<float> data;
};

std::vector<Grad> MakeGrads(const std::string& prefix, const std::vector<int64_t>& sizes) {
  std::vector<Grad> grads;
  for (size_t g = 0; g < sizes.size(); ++g) {
    grads.push_back(Grad{absl::StrCat(prefix, ".", g), std::vector<float>(sizes[g])});
  }
  return grads;
}

// One step: fills, submits in reverse (backward) order, waits, returns the first error.
// `gap`: a sleep before each submission after the first (a slow backward: each lands in a
// negotiation round of its own). On `waiting_rank`, the first tensor's handle is waited for before
// the second is submitted (a program that needs its result to go on).
std::string RunStep(std::vector<Grad>& grads, int step, int contributors = -1,
                    absl::Duration gap = absl::ZeroDuration(), int waiting_rank = -1) {
  std::vector<Handle> handles;
  for (auto it = grads.rbegin(); it != grads.rend(); ++it) {
    if (it != grads.rbegin()) absl::SleepFor(gap);
    if (handles.size() == 1 && Rank() == waiting_rank) {
      absl::Status s = handles[0].Wait(kWait);
      if (!s.ok()) return std::string(s.message());
    }
    for (size_t i = 0; i < it->data.size(); ++i) it->data[i] = Value(Rank(), step, i);
    const int64_t n = static_cast<int64_t>(it->data.size());
    absl::StatusOr<Handle> h = Allreduce(it->name, MakeTensor(it->data.data(), {n}),
                                         MakeTensor(it->data.data(), {n}), {ReduceOp::kSum});
    if (!h.ok()) return std::string(h.status().message());
    handles.push_back(*h);
  }
  for (Handle& h : handles) {
    absl::Status s = h.Wait(kWait);
    if (!s.ok()) return std::string(s.message());
  }
  const int n = contributors < 0 ? Size() : contributors;
  for (const Grad& g : grads) {
    for (size_t i : {size_t{0}, g.data.size() / 2, g.data.size() - 1}) {
      if (g.data[i] != Expected(step, i, n)) {
        return absl::StrCat(g.name, "[", i, "] = ", g.data[i], " at step ", step, ", expected ",
                            Expected(step, i, n));
      }
    }
  }
  return "";
}

TEST_CASE("repeated steps freeze a plan that runs with no negotiation and exact sums", "[plan]") {
  // Small tensors fuse; the 2 MiB one is reduced in place on its own.
  std::vector<Grad> grads = MakeGrads("p.basic", {3, 1000, 512 * 1024, 17, 40000});
  const RuntimeStats before = Stats();
  int64_t negotiated_when_planned = -1;
  for (int step = 0; step < kSteps; ++step) {
    INFO("step " << step);
    REQUIRE(RunStep(grads, step) == "");
    if (step == kQuietFrom - 1) negotiated_when_planned = Stats().negotiated_operations;
  }
  const RuntimeStats after = Stats();
  CHECK(after.plans_frozen > before.plans_frozen);
  CHECK(after.planned_tensors == 5);
  // The last steps ran entirely on the plan: not one operation negotiated.
  CHECK(after.negotiated_operations == negotiated_when_planned);
  CHECK(after.planned_launches - before.planned_launches >= 6);
}

TEST_CASE("grouped, averaged and float64 allreduces run under a plan", "[plan]") {
  std::vector<double> d(300);
  std::vector<float> a(64), b(65);
  int64_t negotiated_when_planned = -1;
  for (int step = 0; step < kSteps; ++step) {
    INFO("step " << step);
    for (size_t i = 0; i < d.size(); ++i) d[i] = Rank() * 0.5 + step + static_cast<double>(i);
    std::fill(a.begin(), a.end(), static_cast<float>(Rank() + step));
    std::fill(b.begin(), b.end(), static_cast<float>(2 * Rank()));
    AllreduceOptions average;
    average.op = ReduceOp::kAverage;
    absl::StatusOr<Handle> hd =
        Allreduce("p.mixed.d", MakeTensor(d.data(), {300}), MakeTensor(d.data(), {300}), average);
    absl::StatusOr<Handle> hg = GroupedAllreduce(
        {"p.mixed.a", "p.mixed.b"}, {MakeTensor(a.data(), {64}), MakeTensor(b.data(), {65})},
        {MakeTensor(a.data(), {64}), MakeTensor(b.data(), {65})}, {ReduceOp::kSum});
    REQUIRE(hd.ok());
    REQUIRE(hg.ok());
    REQUIRE(hd->Wait(kWait).ok());
    REQUIRE(hg->Wait(kWait).ok());
    const double n = Size();
    CHECK(d[7] == Approx((n - 1) * 0.25 + step + 7.0));
    CHECK(a[63] == static_cast<float>(n * (n - 1) / 2 + n * step));
    CHECK(b[0] == static_cast<float>(n * (n - 1)));
    if (step == kQuietFrom - 1) negotiated_when_planned = Stats().negotiated_operations;
  }
  CHECK(Stats().negotiated_operations == negotiated_when_planned);
}

TEST_CASE("waiting on each tensor before submitting the next works under a plan", "[plan]") {
  std::vector<Grad> grads = MakeGrads("p.each", {10, 20, 30});
  int64_t negotiated_when_planned = -1;
  for (int step = 0; step < kSteps; ++step) {
    for (Grad& g : grads) {
      std::vector<Grad> one = {g};
      one[0].name = g.name;
      REQUIRE(RunStep(one, step) == "");
    }
    if (step == kQuietFrom - 1) negotiated_when_planned = Stats().negotiated_operations;
  }
  CHECK(Stats().negotiated_operations == negotiated_when_planned);
}

TEST_CASE("a shape change on one rank under a plan fails that tensor on every rank, not others",
          "[plan][mismatch]") {
  std::vector<float> x(6), y(8);
  for (int step = 0; step < 9; ++step) {
    INFO("step " << step);
    const int64_t cols = step == 6 && Rank() == Size() - 1 ? 4 : 3;
    x.assign(static_cast<size_t>(2 * cols), 1.0f);
    y.assign(8, 2.0f);
    absl::StatusOr<Handle> hy =
        Allreduce("p.mm.y", MakeTensor(y.data(), {8}), MakeTensor(y.data(), {8}), {ReduceOp::kSum});
    absl::StatusOr<Handle> hx = Allreduce("p.mm.x", MakeTensor(x.data(), {2, cols}),
                                          MakeTensor(x.data(), {2, cols}), {ReduceOp::kSum});
    REQUIRE(hx.ok());
    REQUIRE(hy.ok());
    const auto start = std::chrono::steady_clock::now();
    const absl::Status sx = hx->Wait(kWait);
    const absl::Status sy = hy->Wait(kWait);
    INFO(sx.message());
    CHECK(sy.ok());
    CHECK(y[7] == 2.0f * Size());
    if (step == 6) {
      CHECK(absl::StartsWith(sx.message(), absl::StrCat("rank ", Rank(), ": ")));
      CHECK(absl::StrContains(sx.message(), "allreduce 'p.mm.x': shape mismatch"));
      CHECK(Seconds(start) < 0.8);
    } else {
      CHECK(sx.ok());
      CHECK(x[5] == static_cast<float>(Size()));
    }
  }
  CHECK(Stats().plans_dropped >= 1);
}

TEST_CASE("a shape change while every rank waits on each tensor before the next fails at once",
          "[plan][mismatch]") {
  // Each tensor is a unit of its own and no rank submits the next before the last one's result
  // is in: the diverged check's stop lies beyond what any rank can start, so the ranks ask to
  // drop the plan at once instead of waiting out its patience (at least 1 s).
  std::vector<float> a, b(5), c(7);
  for (int step = 0; step < 12; ++step) {
    INFO("step " << step);
    const int64_t n = step == 8 && Rank() == Size() - 1 ? 4 : 3;
    a.assign(static_cast<size_t>(n), 1.0f);
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<Handle> ha = Allreduce("p.seq.a", MakeTensor(a.data(), {n}),
                                          MakeTensor(a.data(), {n}), {ReduceOp::kSum});
    REQUIRE(ha.ok());
    const absl::Status sa = ha->Wait(kWait);
    INFO(sa.message());
    if (step == 8) {
      CHECK(absl::StrContains(sa.message(), "allreduce 'p.seq.a': shape mismatch"));
      CHECK(Seconds(start) < 0.8);
    } else {
      REQUIRE(sa.ok());
      CHECK(a[2] == static_cast<float>(Size()));
    }
    for (std::vector<float>* v : {&b, &c}) {
      std::fill(v->begin(), v->end(), 2.0f);
      const int64_t m = static_cast<int64_t>(v->size());
      absl::StatusOr<Handle> h =
          Allreduce(v == &b ? "p.seq.b" : "p.seq.c", MakeTensor(v->data(), {m}),
                    MakeTensor(v->data(), {m}), {ReduceOp::kSum});
      REQUIRE(h.ok());
      REQUIRE(h->Wait(kWait).ok());
      CHECK(v->back() == 2.0f * Size());
    }
  }
  CHECK(Stats().plans_dropped >= 1);
}

TEST_CASE("every rank changing a planned shape alike is renegotiated, not an error", "[plan]") {
  for (int step = 0; step < 9; ++step) {
    INFO("step " << step);
    const int64_t n = step < 6 ? 5 : 9;
    std::vector<float> x(static_cast<size_t>(n), static_cast<float>(Rank()));
    absl::StatusOr<Handle> h = Allreduce("p.same.x", MakeTensor(x.data(), {n}),
                                         MakeTensor(x.data(), {n}), {ReduceOp::kSum});
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    CHECK(x[static_cast<size_t>(n - 1)] == static_cast<float>(Size() * (Size() - 1) / 2));
  }
}

TEST_CASE("a planned tensor that no rank submits any more drops the plan instead of hanging",
          "[plan]") {
  std::vector<Grad> grads = MakeGrads("p.skip", {100, 200, 300});
  const int64_t dropped = Stats().plans_dropped;
  for (int step = 0; step < 6; ++step) REQUIRE(RunStep(grads, step) == "");
  // From here on no rank submits p.skip.0 (a layer frozen for fine-tuning, say); the plan's
  // first unit waits for it, so after its patience the ranks drop the plan and negotiate.
  std::vector<Grad> rest(grads.begin() + 1, grads.end());
  const auto start = std::chrono::steady_clock::now();
  for (int step = 6; step < 9; ++step) REQUIRE(RunStep(rest, step) == "");
  CHECK(Seconds(start) < 10.0);
  CHECK(Stats().plans_dropped > dropped);
}

TEST_CASE(
    "a tensor the program stops submitting at the end of its step costs about a step, "
    "not the plan's patience",
    "[plan]") {
  // Each step: 400 ms of compute, the gradients (waited for), then a metric in a unit of its own
  // (a loss reduced for logging while warming up, say). The plan's patience is 4 steps (1.6 s);
  // once the program submits the next step's gradients without the metric the plan waits for,
  // the ranks drop it within a quarter step.
  std::vector<Grad> grads = MakeGrads("p.moved", {100, 200});
  const absl::Duration compute = absl::Milliseconds(400);
  auto metric = [](int step) {
    float loss = static_cast<float>(step + Rank());
    absl::StatusOr<Handle> h = Allreduce("p.moved.metric", MakeTensor(&loss, {1}),
                                         MakeTensor(&loss, {1}), {ReduceOp::kSum});
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    CHECK(loss == static_cast<float>(Size() * step + Size() * (Size() - 1) / 2));
  };
  int step = 0;
  for (; step < 12 && !(step >= 5 && Stats().planned_tensors == 3); ++step) {
    absl::SleepFor(compute);
    REQUIRE(RunStep(grads, step) == "");
    metric(step);
  }
  REQUIRE(Stats().planned_tensors == 3);  // the gradients and the metric
  const int64_t dropped = Stats().plans_dropped;
  const auto start = std::chrono::steady_clock::now();
  for (int last = step + 2; step < last; ++step) {
    absl::SleepFor(compute);
    REQUIRE(RunStep(grads, step) == "");
  }
  // Two steps of compute and a quarter step of grace; waiting out the patience takes 2.4 s.
  CHECK(Seconds(start) < 1.8);
  CHECK(Stats().plans_dropped == dropped + 1);
}

TEST_CASE("Join under a plan: the ranks with data get exact sums of theirs", "[plan][join]") {
  std::vector<Grad> grads = MakeGrads("p.join", {50, 600});
  // Rank 0 has 12 batches, the others 7: after their last one they join and send zeros.
  const int mine = Rank() == 0 ? 12 : 7;
  for (int step = 0; step < mine; ++step) {
    INFO("step " << step);
    REQUIRE(RunStep(grads, step, step < 7 ? Size() : 1) == "");
  }
  absl::StatusOr<Handle> join = Join();
  REQUIRE(join.ok());
  REQUIRE(join->Wait(kWait).ok());
  // Everyone again, for several steps (the plan restarts or is learned again).
  for (int step = 20; step < 26; ++step) REQUIRE(RunStep(grads, step) == "");
}

TEST_CASE("a new set of tensors replaces a plan that is no longer used", "[plan]") {
  std::vector<Grad> first = MakeGrads("p.first", {64, 64});
  std::vector<Grad> second = MakeGrads("p.second", {32, 32, 32});
  const int64_t frozen = Stats().plans_frozen;
  for (int step = 0; step < 6; ++step) REQUIRE(RunStep(first, step) == "");
  int64_t negotiated = -1;
  for (int step = 0; step < kSteps; ++step) {
    REQUIRE(RunStep(second, step) == "");
    if (step == kQuietFrom - 1) negotiated = Stats().negotiated_operations;
  }
  CHECK(Stats().plans_frozen >= frozen + 2);
  CHECK(Stats().negotiated_operations == negotiated);
}

TEST_CASE("negotiated operations between planned steps keep working", "[plan]") {
  std::vector<Grad> grads = MakeGrads("p.mix", {128, 4096});
  const int64_t frozen = Stats().plans_frozen;
  for (int step = 0; step < 12; ++step) {
    INFO("step " << step);
    REQUIRE(RunStep(grads, step) == "");
    // A broadcast every step and a loss allreduce every third: never part of the plan's step.
    std::vector<int32_t> seed(3, Rank() == 0 ? step : -1);
    absl::StatusOr<Handle> b =
        Broadcast("p.mix.seed", MakeTensor(seed.data(), {3}), MakeTensor(seed.data(), {3}), {0});
    REQUIRE(b.ok());
    REQUIRE(b->Wait(kWait).ok());
    CHECK(seed[2] == step);
    if (step % 3 == 0) {
      double loss = 1.0;
      absl::StatusOr<Handle> l =
          Allreduce("p.mix.loss", MakeTensor(&loss, {1}), MakeTensor(&loss, {1}), {ReduceOp::kSum});
      REQUIRE(l.ok());
      REQUIRE(l->Wait(kWait).ok());
      CHECK(loss == static_cast<double>(Size()));
    }
  }
  // The gradients are planned; the loss, reduced every third step only, stays negotiated.
  CHECK(Stats().plans_frozen > frozen);
  CHECK(Stats().planned_tensors == 2);
}

TEST_CASE("tensors submitted far apart with no wait between them share one launch unit",
          "[plan][units]") {
  // DDP-sized units: negotiation agrees these five in five rounds, but the program looked at no
  // outcome between them, so the plan waits for all five and sends them as one unit.
  std::vector<Grad> grads = MakeGrads("p.spread", {100, 200, 300, 400, 500});
  int64_t negotiated_when_planned = -1;
  for (int step = 0; step < kSteps; ++step) {
    INFO("step " << step);
    REQUIRE(RunStep(grads, step, -1, absl::Milliseconds(5)) == "");
    if (step == kQuietFrom - 1) negotiated_when_planned = Stats().negotiated_operations;
  }
  CHECK(Stats().planned_tensors == 5);
  CHECK(Stats().planned_units == 1);
  CHECK(Stats().negotiated_operations == negotiated_when_planned);
}

TEST_CASE("a wait between two tensors on one rank only splits their units on every rank",
          "[plan][units]") {
  // Rank 0 waits for its first tensor before submitting the second; the others do not. A unit
  // holding both would wait for rank 0's second tensor, which waits for the unit: every rank
  // must cut the plan there (the marks are ORed across ranks when the plan freezes).
  std::vector<Grad> grads = MakeGrads("p.waits", {100, 200, 300});
  const auto start = std::chrono::steady_clock::now();
  int64_t negotiated_when_planned = -1;
  for (int step = 0; step < kSteps; ++step) {
    INFO("step " << step);
    REQUIRE(RunStep(grads, step, -1, absl::Milliseconds(1), /*waiting_rank=*/0) == "");
    if (step == kQuietFrom - 1) negotiated_when_planned = Stats().negotiated_operations;
  }
  CHECK(Seconds(start) < 10.0);  // no unit waited out the plan's patience
  CHECK(Stats().planned_tensors == 3);
  CHECK(Stats().planned_units == 2);  // {p.waits.2}, {p.waits.1, p.waits.0}
  CHECK(Stats().negotiated_operations == negotiated_when_planned);
}

}  // namespace
}  // namespace overlap
