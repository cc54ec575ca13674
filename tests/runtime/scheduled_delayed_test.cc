// Delayed plans (runtime/planes/plan_delays.h): a scheduled plan whose buckets have a delay and an
// update period, as deft makes them with OVERLAP_STALENESS > 0. OVERLAP_TEST_PLAN_SCHEDULE gives
// every bucket of the planner's plan the schedule "delay,period" with staggered phases, so the test
// does not depend on this machine's timings. Checked exactly, per element:
//   - every output is zero or a sum of whole step averages (nothing partial, nothing invented);
//   - right after adoption, the first `delay` steps have no update (has_update() false);
//   - after a flush (delay + period steps of zero gradients), the outputs summed over the run
//     equal the sum of every step's average: nothing is lost or counted twice.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/overlap.h"
#include "tests/runtime/agreed.h"
#include "tests/runtime/gradient_options.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);

// Rank r contributes r + step + (i % 5) at element i (zero once flushing); sums stay exact.
float Value(int rank, int step, size_t i, bool flushing) {
  return flushing ? 0.0f : static_cast<float>(rank + step + static_cast<int>(i % 5));
}
double Average(int step, size_t i, int size) {
  return (size - 1) / 2.0 + step + static_cast<int>(i % 5);
}

struct Layer {
  std::string name;
  std::vector<float> grad;
  std::vector<double> delivered;  // summed over the run, per element
  Handle handle;
  bool pending = false;
};

std::vector<Layer> MakeModel() {
  const std::vector<int64_t> sizes = {3, 1000, 250000, 17, 400000, 64, 4096, 131072, 5};
  std::vector<Layer> layers;
  for (size_t l = 0; l < sizes.size(); ++l) {
    Layer layer;
    layer.name = absl::StrCat("layer", l, ".weight");
    layer.grad.assign(static_cast<size_t>(sizes[l]), 0.0f);
    layer.delivered.assign(static_cast<size_t>(sizes[l]), 0.0);
    layers.push_back(std::move(layer));
  }
  return layers;
}

struct Outcome {
  std::string error;
  int with_update = 0;   // layers whose handle said has_update()
  bool planned = false;  // the plan ran this step
};

// Adds a layer's finished result to the run's sum. Before the plan the result must be this
// step's average.
std::string Collect(Layer& layer, int step, bool expect_sync, Outcome* outcome) {
  if (layer.handle.has_update()) ++outcome->with_update;
  for (size_t i = 0; i < layer.grad.size(); ++i) {
    const double got = layer.grad[i];
    if (expect_sync && got != Average(step, i, Size())) {
      return absl::StrCat(layer.name, "[", i, "] = ", got, " at step ", step, ", expected ",
                          Average(step, i, Size()));
    }
    if (!layer.handle.has_update() && got != 0.0) {
      return absl::StrCat(layer.name, "[", i, "] = ", got, " at step ", step, " without an update");
    }
    layer.delivered[i] += got;
  }
  return "";
}

// An allreduce the step reads at once (a metric in the forward, batch-norm statistics in the
// backward), not a gradient: whatever the plan, its result is this step's sum.
std::string ReadAtOnce(const std::string& name, int step) {
  std::vector<float> value(4, static_cast<float>(Rank() + step));
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  absl::StatusOr<Handle> h =
      Allreduce(name, MakeTensor(value.data(), {4}), MakeTensor(value.data(), {4}), sum);
  if (!h.ok()) return std::string(h.status().message());
  const absl::Status s = h->Wait(kWait);
  if (!s.ok()) return std::string(s.message());
  const float expected = static_cast<float>(Size() * (Size() - 1) / 2 + Size() * step);
  if (value[0] != expected || !h->has_update()) {
    return absl::StrCat(name, " = ", value[0], " at step ", step, ", expected ", expected);
  }
  return "";
}

// `adopted`: the runtime's step at which the plan took over (Stats().plan_adopted_step), -1 before.
// `read_at_once`: the step also reduces a metric and statistics it reads at once (ReadAtOnce).
Outcome Step(std::vector<Layer>& layers, int step, int64_t adopted, bool flushing,
             bool read_at_once = true) {
  Outcome outcome;
  if (!StartForward().ok()) return Outcome{"StartForward failed", 0};
  // The runtime's number for this step; the plan runs it if it was adopted at or before it.
  const int64_t runtime_step = Stats().steps;
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  if (read_at_once) {
    if (std::string e = ReadAtOnce("metric", step); !e.empty()) return Outcome{e, 0};
  }
  if (!StartBackward().ok()) return Outcome{"StartBackward failed", 0};
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    if (read_at_once && it == layers.rbegin() + 2) {
      if (std::string e = ReadAtOnce("stats", step); !e.empty()) return Outcome{e, 0};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(600));
    for (size_t i = 0; i < it->grad.size(); ++i) it->grad[i] = Value(Rank(), step, i, flushing);
    const int64_t n = static_cast<int64_t>(it->grad.size());
    absl::StatusOr<Handle> h = Allreduce(
        it->name, testing::GradientTensor(it->name, it->grad.data(), n),
        testing::GradientTensor(it->name, it->grad.data(), n), testing::GradientOptions());
    if (!h.ok()) return Outcome{std::string(h.status().message()), 0};
    it->handle = *h;
    it->pending = true;
  }
  if (!StartUpdate().ok()) return Outcome{"StartUpdate failed", 0};
  for (Layer& layer : layers) {
    const absl::Status s = layer.handle.Wait(kWait);
    layer.pending = false;
    if (!s.ok()) return Outcome{std::string(s.message()), 0};
    // Read only once the result is in: the coordinator adopts the plan when it reaches this
    // step, which on a loaded machine can be after the application has submitted every layer.
    const int64_t now_adopted = adopted >= 0 ? adopted : Stats().plan_adopted_step;
    const bool planned = now_adopted >= 0 && runtime_step >= now_adopted;
    outcome.planned = planned;
    outcome.error = Collect(layer, step, /*expect_sync=*/!planned, &outcome);
    if (!outcome.error.empty()) return outcome;
  }
  return outcome;
}

// Trains from step 0 until the plan has run `planned` steps on every rank (at most 60 steps);
// returns the step the plan was adopted at, -1 if never, and leaves `step` at the next one.
int64_t TrainUntilPlanned(std::vector<Layer>& layers, int& step, int planned) {
  int64_t adopted = -1;
  for (step = 0; step < 60 && (adopted < 0 || step < adopted + planned); ++step) {
    REQUIRE(Step(layers, step, adopted, /*flushing=*/false).error == "");
    adopted = testing::AgreedMax(Stats().plan_adopted_step);
  }
  return adopted;
}

// OVERLAP_COMPRESSION=fp16 (tests/runtime/BUILD): every bucket of the plan compresses, and the
// values checked stay exact (small integers and halves are exact in fp16).
void RequireCompressedWhenAsked(const RuntimeStats& stats) {
  const char* compression = std::getenv("OVERLAP_COMPRESSION");
  if (compression != nullptr && std::string(compression) != "none") {
    REQUIRE(stats.plan_compressed_buckets == stats.plan_buckets);
  } else {
    REQUIRE(stats.plan_compressed_buckets == 0);
  }
}

TEST_CASE("a delayed plan delivers every step's average once, delay steps later", "[delivery]") {
  const char* spec = std::getenv("OVERLAP_TEST_PLAN_SCHEDULE");
  REQUIRE(spec != nullptr);
  int delay = 0, period = 1;
  REQUIRE(std::sscanf(spec, "%d,%d", &delay, &period) == 2);
  std::vector<Layer> layers = MakeModel();
  int step = 0;
  int64_t adopted = -1;
  int planned_steps = 0;
  int steps_with_updates = 0;
  int64_t dropped = 0;
  int sent_steps = 0;
  for (; step < 60 && planned_steps < 12; ++step) {
    INFO("rank " << Rank() << " step " << step);
    const Outcome o = Step(layers, step, adopted, /*flushing=*/false);
    REQUIRE(o.error == "");
    if (o.planned) {
      if (planned_steps < delay) REQUIRE(o.with_update == 0);  // nothing is due yet
      // Every bucket communicates once per period, so updates come at least that often.
      if (planned_steps >= delay && o.with_update > 0) ++steps_with_updates;
      ++planned_steps;
    }
    if (adopted < 0) {
      adopted = Stats().plan_adopted_step;
      dropped = Stats().plans_dropped;  // the observed plan the scheduled one replaced
    }
    ++sent_steps;
  }
  REQUIRE(planned_steps == 12);
  REQUIRE(steps_with_updates >= (planned_steps - delay) / period);
  const RuntimeStats during = Stats();
  INFO("rank " << Rank() << ": planner '" << during.planner << "', " << during.plan_buckets
               << " buckets, adopted at step " << during.plan_adopted_step);
  REQUIRE(during.plans_scheduled == 1);
  REQUIRE(during.plans_dropped == dropped);
  if (delay > 0 || period > 1) REQUIRE(during.delayed_bytes > 0);
  if (testing::GradientDevice().is_cuda()) {
    // The delay line held the gradients' copies, residuals and results on the (proxy) device.
    REQUIRE(during.cuda_executor == "proxy+mpi");
    if (delay > 0 || period > 1) REQUIRE(during.delayed_device_bytes == during.delayed_bytes);
  } else {
    REQUIRE(during.delayed_device_bytes == 0);
  }
  // Every bucket has the same period: the plan's pattern repeats after it.
  REQUIRE(during.plan_update_cycle == period);
  RequireCompressedWhenAsked(during);
  // Flush: zeros until every residual has been sent and every result delivered.
  for (int extra = 0; extra < delay + period + 1; ++extra, ++step) {
    const Outcome o = Step(layers, step, adopted, /*flushing=*/true);
    REQUIRE(o.error == "");
  }
  for (Layer& layer : layers) {
    for (size_t i = 0; i < layer.grad.size(); ++i) {
      double expected = 0;
      for (int s = 0; s < sent_steps; ++s) expected += Average(s, i, Size());
      INFO(layer.name << "[" << i << "]");
      REQUIRE(layer.delivered[i] == expected);
    }
  }
  REQUIRE(Stats().plans_dropped == dropped);
  // plan_delays.h's bound: up to d + p + 1 copies and a residual per tensor, ceil((d + 1) / p)
  // results per bucket.
  int64_t model_bytes = 0;
  for (const Layer& layer : layers) model_bytes += static_cast<int64_t>(layer.grad.size()) * 4;
  const int64_t bound = model_bytes * ((delay + period + 1) + 1 + (delay + period) / period);
  REQUIRE(during.delayed_bytes <= bound);
  REQUIRE(Stats().delayed_bytes <= bound);
}

TEST_CASE("a plan's tensor submitted again with another shape is reduced, never overrun") {
  // A second model trained in the same process reuses the first one's names with other shapes.
  std::vector<Layer> layers = MakeModel();
  int step = 0;
  REQUIRE(TrainUntilPlanned(layers, step, 4) >= 0);
  // layer1.weight (1000 elements in the plan) comes back with 10, in a buffer whose tail must
  // stay untouched; the others as before.
  REQUIRE(StartForward().ok());
  REQUIRE(StartBackward().ok());
  std::vector<float> small(1000, -7.0f);
  for (size_t i = 0; i < 10; ++i) small[i] = Value(Rank(), step, i, false);
  std::vector<Handle> handles;
  for (Layer& layer : layers) {
    const bool changed = layer.name == "layer1.weight";
    for (size_t i = 0; i < layer.grad.size(); ++i) layer.grad[i] = Value(Rank(), step, i, false);
    const int64_t n = changed ? 10 : static_cast<int64_t>(layer.grad.size());
    float* data = changed ? small.data() : layer.grad.data();
    absl::StatusOr<Handle> h =
        Allreduce(layer.name, testing::GradientTensor(layer.name, data, n),
                  testing::GradientTensor(layer.name, data, n), testing::GradientOptions());
    REQUIRE(h.ok());
    handles.push_back(*h);
  }
  REQUIRE(StartUpdate().ok());
  for (Handle& h : handles) {
    const absl::Status s = h.Wait(kWait);
    INFO("rank " << Rank() << ": " << s.message());
    REQUIRE(s.ok());
  }
  for (size_t i = 0; i < small.size(); ++i) {
    INFO("rank " << Rank() << ": element " << i << " of the 10-element submission's buffer");
    REQUIRE(small[i] == (i < 10 ? Average(step, i, Size()) : -7.0));
  }
}

// Run by scheduled_deft_chooses_2ranks_test only (OVERLAP_PLANNER=deft, OVERLAP_STALENESS=1, no
// test hook): 24 MiB of gradients a step against 4 ms of compute, so no synchronous plan can hide
// the communication and deft must delay buckets itself. The plan's own schedule, read back from
// CurrentPlanSchedule(), says which slices are late; the values are checked against it: before
// the plan every result is this step's average, under it every output is zero or whole step
// averages, and after a flush each element has received every step's average exactly once.
TEST_CASE("deft chooses delays on its own where the windows are too small", "[.deft]") {
  const std::vector<int64_t> sizes = {1 << 20, 2 << 20, 64, 3 << 20};
  std::vector<Layer> layers;
  for (size_t l = 0; l < sizes.size(); ++l) {
    Layer layer;
    layer.name = absl::StrCat("big", l, ".weight");
    layer.grad.assign(static_cast<size_t>(sizes[l]), 0.0f);
    layer.delivered.assign(static_cast<size_t>(sizes[l]), 0.0);
    layers.push_back(std::move(layer));
  }
  int step = 0;
  int64_t adopted = -1;
  int planned_steps = 0;
  int late_steps = 0;  // planned steps at which some layer had no update yet
  for (; step < 80 && planned_steps < 10; ++step) {
    INFO("rank " << Rank() << " step " << step);
    const Outcome o = Step(layers, step, adopted, /*flushing=*/false, /*read_at_once=*/false);
    REQUIRE(o.error == "");
    if (o.planned) {
      ++planned_steps;
      if (o.with_update < static_cast<int>(layers.size())) ++late_steps;
    }
    adopted = testing::AgreedMax(Stats().plan_adopted_step);  // every rank, every step
  }
  const RuntimeStats stats = Stats();
  const PlanSchedule schedule = CurrentPlanSchedule();
  INFO("rank " << Rank() << ": planner '" << stats.planner << "', " << stats.plan_buckets
               << " buckets, mean staleness " << stats.plan_mean_staleness << ", adopted at step "
               << stats.plan_adopted_step);
  REQUIRE(planned_steps == 10);
  REQUIRE(stats.planner == "deft");
  int max_delay = 0;
  for (const auto& [name, slices] : schedule.tensors) {
    for (const ScheduledSlice& slice : slices) max_delay = std::max(max_delay, slice.delay);
  }
  RequireCompressedWhenAsked(stats);
  const char* budget = std::getenv("OVERLAP_BUDGET");
  if (budget != nullptr && std::string(budget) == "0") {
    // A convergence budget of 0 (scheduled_deft_budget0_2ranks_test): the same windows, but no
    // byte may arrive late, so the plan is synchronous and every step delivers its own average.
    REQUIRE(max_delay == 0);
    REQUIRE(stats.plan_mean_staleness == 0);
    REQUIRE(stats.plan_update_cycle == 1);
    REQUIRE(stats.delayed_bytes == 0);
    REQUIRE(late_steps == 0);
  } else {
    // deft's own choice: some slice delayed, none beyond the staleness bound.
    REQUIRE(max_delay == 1);
    REQUIRE(stats.plan_mean_staleness > 0);
    REQUIRE(stats.delayed_bytes > 0);
    REQUIRE(late_steps >= 1);  // the first planned step's delayed slices had nothing to deliver
  }
  for (int extra = 0; extra < 3; ++extra, ++step) {
    REQUIRE(Step(layers, step, adopted, /*flushing=*/true, /*read_at_once=*/false).error == "");
  }
  for (Layer& layer : layers) {
    for (size_t i = 0; i < layer.grad.size(); i += 97) {
      double expected = 0;
      for (int s = 0; s < step - 3; ++s) expected += Average(s, i, Size());
      INFO(layer.name << "[" << i << "]");
      REQUIRE(layer.delivered[i] == expected);
    }
  }
}

// Run by scheduled_uneven_shutdown_test.sh only: rank 1 runs one step more than the others under
// a delayed plan, then every rank shuts down. The others drain and shut down; rank 1's extra
// step is a pass they will never run, which must fail its Shutdown at once with the reason (not
// after OVERLAP_COLLECTIVE_TIMEOUT_S), and theirs with it.
TEST_CASE("a rank that ran more steps than the others fails Shutdown at once", "[.uneven]") {
  std::vector<Layer> layers = MakeModel();
  int step = 0;
  const int64_t adopted = TrainUntilPlanned(layers, step, 3);
  REQUIRE(adopted >= 0);
  // Gradients only: the extra step's metric would wait for a rank that never submits it.
  if (Rank() == 1) {
    REQUIRE(Step(layers, step, adopted, /*flushing=*/false, /*read_at_once=*/false).error == "");
  }
  const int rank = Rank();
  const absl::Time start = absl::Now();
  const absl::Status down = Shutdown();
  std::fprintf(stderr, "uneven: rank %d: Shutdown returned after %.1f s: %s\n", rank,
               absl::ToDoubleSeconds(absl::Now() - start), std::string(down.message()).c_str());
}

}  // namespace
}  // namespace overlap
