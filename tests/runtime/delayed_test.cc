// Delayed updates and update periods (runtime/planes/delay_line.h) on real ranks: every handle's output
// is checked against the exact sum it must hold, nothing is lost (what was delivered plus what
// is still held equals every input), and bad schedules fail on every rank naming the tensor.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);

// Rank r's input at step n, element i: small integers, so float sums are exact.
float Input(int rank, int64_t n, size_t i) {
  return static_cast<float>(rank + 10 * n + static_cast<int64_t>(i % 5));
}
// The sum over ranks of the inputs of steps [first, last].
float SumOfSteps(int64_t first, int64_t last, size_t i) {
  float total = 0;
  for (int64_t n = first; n <= last; ++n) {
    for (int r = 0; r < Size(); ++r) total += Input(r, n, i);
  }
  return total;
}

struct StepResult {
  bool has_update = false;
  std::vector<float> output;
};

// Submits `steps` steps of tensor `name` (in place) and waits for each.
std::vector<StepResult> Run(const std::string& name, int steps, AllreduceOptions options,
                            size_t size = 37) {
  std::vector<StepResult> results;
  std::vector<float> grad(size);
  for (int64_t n = 0; n < steps; ++n) {
    for (size_t i = 0; i < size; ++i) grad[i] = Input(Rank(), n, i);
    const int64_t len = static_cast<int64_t>(size);
    absl::StatusOr<Handle> h =
        Allreduce(name, MakeTensor(grad.data(), {len}), MakeTensor(grad.data(), {len}), options);
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    results.push_back(StepResult{h->has_update(), grad});
  }
  return results;
}

AllreduceOptions Schedule(int delay, int period, int phase, ReduceOp op = ReduceOp::kSum) {
  AllreduceOptions o;
  o.op = op;
  o.delay = delay;
  o.period = period;
  o.phase = phase;
  return o;
}

// The submission whose reduction reaches step n, and the first step that reduction carries.
struct Due {
  bool any = false;
  int64_t first = 0, last = 0;
};
Due DueAt(int64_t n, int delay, int period, int phase) {
  const int64_t m = n - delay;
  if (m < 0 || m % period != phase) return {};
  // It sends its own input plus every skipped one since the previous communicating step.
  return Due{true, std::max<int64_t>(0, m - period + 1), m};
}

TEST_CASE("delayed and periodic allreduces deliver exactly the sums they owe", "[delay]") {
  struct Case {
    int delay, period, phase;
  };
  for (const Case c : {Case{1, 1, 0}, Case{2, 1, 0}, Case{0, 2, 1}, Case{0, 4, 2}, Case{1, 2, 0},
                       Case{2, 2, 1}, Case{3, 4, 3}}) {
    const std::string name = absl::StrCat("d.exact.", c.delay, ".", c.period, ".", c.phase);
    INFO(name);
    const int steps = 12;
    const std::vector<StepResult> got = Run(name, steps, Schedule(c.delay, c.period, c.phase));
    for (int64_t n = 0; n < steps; ++n) {
      INFO("step " << n);
      const Due due = DueAt(n, c.delay, c.period, c.phase);
      CHECK(got[static_cast<size_t>(n)].has_update == due.any);
      for (size_t i : {size_t{0}, size_t{3}, size_t{36}}) {
        const float want = due.any ? SumOfSteps(due.first, due.last, i) : 0.0f;
        CHECK(got[static_cast<size_t>(n)].output[i] == want);
      }
    }
  }
}

TEST_CASE("nothing is lost: delivered plus held equals the sum of every input", "[delay]") {
  // Period 4, phase 1, delay 2, 14 steps: steps 1, 5, 9 and 13 communicate; the result of
  // step 13 (carrying steps 10..13) is due at step 15, so it is still held.
  const int delay = 2, period = 4, phase = 1, steps = 14;
  const int64_t held_before = Stats().delayed_bytes;  // the other tests' tensors
  const std::vector<StepResult> got = Run("d.mass", steps, Schedule(delay, period, phase));
  const RuntimeStats stats = Stats();
  for (size_t i : {size_t{0}, size_t{1}, size_t{4}}) {
    float delivered = 0;
    for (const StepResult& r : got) delivered += r.output[i];
    // Not yet delivered: communicating steps m with m + delay >= steps, each carrying its
    // period's inputs, and the residual since the last communicating step.
    int64_t last_delivered_step = -1;
    for (int64_t m = 0; m + delay < steps; ++m) {
      if (m % period == phase) last_delivered_step = m;
    }
    const float held = SumOfSteps(last_delivered_step + 1, steps - 1, i);
    CHECK(delivered + held == SumOfSteps(0, steps - 1, i));
  }
  // Held now: the residual buffer (37 floats, zero since step 13 sent it) and step 13's result,
  // due at step 15.
  CHECK(stats.delayed_bytes - held_before == 2 * 37 * 4);
}

TEST_CASE("averaging, float64 and a separate output buffer work with a delay", "[delay]") {
  std::vector<double> in(5), out(5, -1);
  for (int64_t n = 0; n < 4; ++n) {
    for (size_t i = 0; i < in.size(); ++i) in[i] = Rank() + 2.0 * n + static_cast<double>(i);
    absl::StatusOr<Handle> h = Allreduce("d.avg", MakeTensor(in.data(), {5}),
                                         MakeTensor(out.data(), {5}),
                                         Schedule(1, 1, 0, ReduceOp::kAverage));
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    INFO("step " << n);
    if (n == 0) {
      CHECK_FALSE(h->has_update());
      CHECK(out[4] == 0.0);
    } else {
      CHECK(h->has_update());
      CHECK(out[4] == Approx((Size() - 1) / 2.0 + 2.0 * (n - 1) + 4.0));
      CHECK(in[4] == Rank() + 2.0 * n + 4.0);  // the input is left alone
    }
  }
}

TEST_CASE("a run restored from a checkpoint goes on bit for bit as the saved one", "[delay]") {
  // Non-integer inputs, so that any lost or doubled contribution would show in the bits.
  auto input = [](int64_t n, size_t i) {
    return 0.1f * static_cast<float>(Rank() + 1) + 0.37f * static_cast<float>(n) +
           0.013f * static_cast<float>(i);
  };
  const AllreduceOptions schedule = Schedule(1, 2, 1, ReduceOp::kAverage);
  std::vector<float> grad(29);
  auto step = [&](int64_t n) {
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = input(n, i);
    absl::StatusOr<Handle> h =
        Allreduce("d.resume", MakeTensor(grad.data(), {29}), MakeTensor(grad.data(), {29}),
                  schedule);
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    return StepResult{h->has_update(), grad};
  };
  for (int64_t n = 0; n < 6; ++n) step(n);
  absl::StatusOr<std::string> checkpoint = SaveCompressionState();
  REQUIRE(checkpoint.ok());
  std::vector<StepResult> first;
  for (int64_t n = 6; n < 13; ++n) first.push_back(step(n));
  REQUIRE(SaveCompressionState().ok());  // waits for the reductions still running
  REQUIRE(RestoreCompressionState(*checkpoint).ok());
  for (int64_t n = 6; n < 13; ++n) {
    const StepResult again = step(n);
    INFO("step " << n);
    const StepResult& before = first[static_cast<size_t>(n - 6)];
    CHECK(again.has_update == before.has_update);
    CHECK(std::memcmp(again.output.data(), before.output.data(), 29 * sizeof(float)) == 0);
  }
  // Not a snapshot: refused, naming the rank.
  absl::Status bad = RestoreCompressionState("overlap-state-v2 and then garbage");
  CHECK_FALSE(bad.ok());
}

TEST_CASE("after a rank joins, the others' delayed reductions count it as zeros", "[delay][join]") {
  // Rank 0 has 6 batches, the others 4; delay 1, so rank 0's step n shows step n - 1.
  const int mine = Rank() == 0 ? 6 : 4;
  std::vector<float> grad(9);
  for (int64_t n = 0; n < mine; ++n) {
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = Input(Rank(), n, i);
    absl::StatusOr<Handle> h = Allreduce("d.join", MakeTensor(grad.data(), {9}),
                                         MakeTensor(grad.data(), {9}), Schedule(1, 1, 0));
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    INFO("step " << n);
    if (n == 0) continue;
    // Steps 0..3 had every rank; step 4 only rank 0.
    const float want = n - 1 <= 3 ? SumOfSteps(n - 1, n - 1, 8) : Input(0, n - 1, 8);
    CHECK(grad[8] == want);
  }
  absl::StatusOr<Handle> join = Join();
  REQUIRE(join.ok());
  REQUIRE(join->Wait(kWait).ok());
}

TEST_CASE("bad schedules are refused at submission naming the rank and the tensor", "[delay]") {
  std::vector<float> f(4);
  std::vector<int32_t> k(4);
  auto expect = [&](const Tensor& t, AllreduceOptions o, const std::string& text) {
    absl::StatusOr<Handle> h = Allreduce("d.bad", t, t, o);
    INFO(text);
    REQUIRE_FALSE(h.ok());
    CHECK(h.status().code() == absl::StatusCode::kInvalidArgument);
    const std::string message(h.status().message());
    CHECK_THAT(message, Catch::Contains(absl::StrCat("rank ", Rank())));
    CHECK_THAT(message, Catch::Contains("'d.bad'"));
    CHECK_THAT(message, Catch::Contains(text));
  };
  const Tensor ft = MakeTensor(f.data(), {4});
  expect(ft, Schedule(-1, 1, 0), "delay -1 is not in 0..16");
  expect(ft, Schedule(17, 1, 0), "delay 17 is not in 0..16");
  expect(ft, Schedule(0, 0, 0), "period 0 is not in 1..64");
  expect(ft, Schedule(0, 2, 2), "phase 2 is not in 0..1");
  expect(ft, Schedule(1, 1, 0, ReduceOp::kMax), "needs sum or average");
  expect(MakeTensor(k.data(), {4}), Schedule(1, 1, 0), "dtype int32");
  // A tensor keeps its schedule.
  std::vector<float> g(4, 1.0f);
  absl::StatusOr<Handle> first =
      Allreduce("d.keep", MakeTensor(g.data(), {4}), MakeTensor(g.data(), {4}), Schedule(1, 1, 0));
  REQUIRE(first.ok());
  REQUIRE(first->Wait(kWait).ok());
  absl::StatusOr<Handle> changed =
      Allreduce("d.keep", MakeTensor(g.data(), {4}), MakeTensor(g.data(), {4}), Schedule(1, 2, 0));
  REQUIRE_FALSE(changed.ok());
  CHECK_THAT(std::string(changed.status().message()),
             Catch::Contains("schedule changed from delay 1, period 1, phase 0 to delay 1, "
                             "period 2, phase 0"));
  // Deliver the outstanding result so the tensor ends empty.
  absl::StatusOr<Handle> last =
      Allreduce("d.keep", MakeTensor(g.data(), {4}), MakeTensor(g.data(), {4}), Schedule(1, 1, 0));
  REQUIRE(last.ok());
  REQUIRE(last->Wait(kWait).ok());
  CHECK(g[0] == static_cast<float>(Size()));
}

TEST_CASE("ranks that disagree on a schedule fail on every rank, naming both", "[delay]") {
  // Rank 0 delays by one step, the others by two: every step's reductions meet and differ, and
  // each rank learns it from the first result due to it (rank 0 at step 1, the others at 2).
  std::vector<float> g(8, 1.0f);
  const AllreduceOptions mine = Rank() == 0 ? Schedule(1, 1, 0) : Schedule(2, 1, 0);
  std::string error;
  for (int n = 0; n < 3; ++n) {
    absl::StatusOr<Handle> h =
        Allreduce("d.mismatch", MakeTensor(g.data(), {8}), MakeTensor(g.data(), {8}), mine);
    REQUIRE(h.ok());
    absl::Status s = h->Wait(kWait);
    if (!s.ok() && error.empty()) error = std::string(s.message());
  }
  CHECK_THAT(error, Catch::Contains("update schedule mismatch"));
  CHECK_THAT(error, Catch::Contains("delay 1, period 1, phase 0"));
  CHECK_THAT(error, Catch::Contains("delay 2, period 1, phase 0"));
}

}  // namespace
}  // namespace overlap
