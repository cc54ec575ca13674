// A delayed scheduled plan survives a checkpoint (runtime/plan/plan_checkpoint.h): a run stopped at
// step K and resumed in fresh processes from SaveCompressionState goes on bit for bit as the
// uninterrupted run did. scheduled_resume_test.sh runs this binary twice on the same ranks:
//   [save]   trains K steps (the plan is adopted and runs the last of them), saves at step K, goes on
//            to K + kAfter, and writes the checkpoint and every later output to files;
//   [resume] a fresh process restores the checkpoint before its first step, runs K+1 .. K+kAfter
//            and compares every output's bits and has_update() with the saved run's, then
//            restores again in the same process (replacing the plan in force) and repeats.
// OVERLAP_TEST_PLAN_SCHEDULE gives every bucket a delay and an update period, so the checkpoint
// holds residuals and undelivered results. Inputs are not integers, so a contribution lost,
// doubled or summed in another order shows in the bits.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/overlap.h"
#include "tests/runtime/gradient_options.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);
constexpr int kAfter = 8;  // steps run after the checkpoint
// The checkpoint's step K: the plan is adopted after about 10 (OVERLAP_PROFILE_STEPS=3), later
// where a vote finds a rank busy.
constexpr int64_t kSaveStep = 40;

float Value(int rank, int64_t step, size_t i) {
  return 0.1f * static_cast<float>(rank + 1) + 0.37f * static_cast<float>(step) +
         0.013f * static_cast<float>(i % 7);
}

struct Layer {
  std::string name;
  std::vector<float> grad;
  Handle handle;
};

std::vector<Layer> MakeModel() {
  const std::vector<int64_t> sizes = {3, 1000, 250000, 17, 400000, 64, 4096, 131072, 5};
  std::vector<Layer> layers;
  for (size_t l = 0; l < sizes.size(); ++l) {
    layers.push_back(Layer{absl::StrCat("layer", l, ".weight"),
                           std::vector<float>(static_cast<size_t>(sizes[l])), Handle()});
  }
  return layers;
}

// One step: every layer's output bytes, then one byte per layer for has_update().
std::string Step(std::vector<Layer>& layers, int64_t step) {
  REQUIRE(StartForward().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(StartBackward().ok());
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    std::this_thread::sleep_for(std::chrono::microseconds(600));
    for (size_t i = 0; i < it->grad.size(); ++i) it->grad[i] = Value(Rank(), step, i);
    const int64_t n = static_cast<int64_t>(it->grad.size());
    absl::StatusOr<Handle> h = Allreduce(
        it->name, testing::GradientTensor(it->name, it->grad.data(), n),
        testing::GradientTensor(it->name, it->grad.data(), n), testing::GradientOptions());
    REQUIRE(h.ok());
    it->handle = *h;
  }
  REQUIRE(StartUpdate().ok());
  std::string out;
  for (Layer& layer : layers) {
    const absl::Status s = layer.handle.Wait(kWait);
    INFO(s.message());
    REQUIRE(s.ok());
    out.append(reinterpret_cast<const char*>(layer.grad.data()), layer.grad.size() * 4);
    out.push_back(layer.handle.has_update() ? 1 : 0);
  }
  return out;
}

std::string PathOf(const char* what) {
  const char* dir = std::getenv("SCHEDULED_RESUME_DIR");
  REQUIRE(dir != nullptr);
  return absl::StrCat(dir, "/", what, ".", Rank());
}

void Write(const char* what, const std::string& bytes) {
  std::ofstream out(PathOf(what), std::ios::binary);
  out << bytes;
  REQUIRE(out.good());
}

std::string Read(const char* what) {
  std::ifstream in(PathOf(what), std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_CASE("the saved run: plan, checkpoint at step K, K+1 .. K+8", "[save]") {
  std::vector<Layer> layers = MakeModel();
  // A fixed K on every rank: a rank-local condition (say, "the plan has run 5 steps here") ends
  // the loop at different steps where one rank's coordinator publishes the adoption later than
  // another's, and the ranks then run different numbers of steps.
  int64_t step = 0;
  for (; step < kSaveStep; ++step) Step(layers, step);
  const RuntimeStats before = Stats();
  INFO("rank " << Rank() << ": plan adopted at step " << before.plan_adopted_step << " of "
               << before.steps);
  REQUIRE(before.plan_adopted_step >= 0);
  REQUIRE(before.steps - before.plan_adopted_step >= 5);  // the plan has run a few steps
  REQUIRE(before.plans_scheduled == 1);
  REQUIRE(before.delayed_bytes > 0);  // residuals and results the checkpoint must carry
  absl::StatusOr<std::string> checkpoint = SaveCompressionState();
  INFO(checkpoint.status().message());
  REQUIRE(checkpoint.ok());
  Write("checkpoint", *checkpoint);
  Write("step", std::to_string(step));
  std::string outputs;
  for (int64_t n = step; n < step + kAfter; ++n) outputs += Step(layers, n);
  Write("outputs", outputs);
  REQUIRE(Stats().plans_scheduled == 1);
  REQUIRE(Stats().plans_dropped == before.plans_dropped);
}

void CompareRun(std::vector<Layer>& layers, int64_t first, const std::string& expected) {
  std::string outputs;
  for (int64_t n = first; n < first + kAfter; ++n) outputs += Step(layers, n);
  REQUIRE(outputs.size() == expected.size());
  const size_t per_step = outputs.size() / kAfter;
  for (int k = 0; k < kAfter; ++k) {
    INFO("rank " << Rank() << ", step " << first + k << " of the resumed run");
    CHECK(std::memcmp(outputs.data() + k * per_step, expected.data() + k * per_step, per_step) ==
          0);
  }
}

TEST_CASE("a fresh process resumed from the checkpoint repeats the saved run bit for bit",
          "[resume]") {
  const std::string checkpoint = Read("checkpoint");
  const int64_t first = std::stoll(Read("step"));
  const std::string expected = Read("outputs");
  // Damaged snapshots are refused, naming the rank, and change nothing.
  const absl::Status truncated =
      RestoreCompressionState(checkpoint.substr(0, checkpoint.size() - 3));
  CHECK(truncated.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(truncated.message()).find(absl::StrCat("rank ", Rank())) != std::string::npos);

  const absl::Status restored = RestoreCompressionState(checkpoint);
  INFO(restored.message());
  REQUIRE(restored.ok());
  std::vector<Layer> layers = MakeModel();
  CompareRun(layers, first, expected);
  const RuntimeStats stats = Stats();
  CHECK(stats.planner == "bytescheduler");
  CHECK(stats.plans_scheduled == 1);
  CHECK(stats.plans_dropped == 0);
  CHECK(stats.negotiated_operations == 0);  // the plan ran every tensor from the first step

  // A save in the middle of a step is refused, naming the rank; the step then goes on.
  REQUIRE(StartForward().ok());
  REQUIRE(StartBackward().ok());
  Layer& last = layers.back();
  absl::StatusOr<Handle> early = Allreduce(
      last.name,
      testing::GradientTensor(last.name, last.grad.data(), static_cast<int64_t>(last.grad.size())),
      testing::GradientTensor(last.name, last.grad.data(), static_cast<int64_t>(last.grad.size())),
      testing::GradientOptions());
  REQUIRE(early.ok());
  const absl::StatusOr<std::string> midstep = SaveCompressionState();
  CHECK(midstep.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(midstep.status().message()),
             Catch::StartsWith(absl::StrCat("rank ", Rank(), ": SaveCompressionState: ")) &&
                 Catch::Contains("in the middle of a step"));
  for (auto it = layers.rbegin() + 1; it != layers.rend(); ++it) {
    const int64_t n = static_cast<int64_t>(it->grad.size());
    absl::StatusOr<Handle> h = Allreduce(
        it->name, testing::GradientTensor(it->name, it->grad.data(), n),
        testing::GradientTensor(it->name, it->grad.data(), n), testing::GradientOptions());
    REQUIRE(h.ok());
    it->handle = *h;
  }
  last.handle = *early;
  REQUIRE(StartUpdate().ok());
  for (Layer& layer : layers) REQUIRE(layer.handle.Wait(kWait).ok());

  // Again in the same process: the restore replaces the plan in force (drained by a save).
  REQUIRE(SaveCompressionState().ok());
  REQUIRE(RestoreCompressionState(checkpoint).ok());
  CompareRun(layers, first, expected);
  CHECK(Stats().plans_scheduled == 2);
}

}  // namespace
}  // namespace overlap
