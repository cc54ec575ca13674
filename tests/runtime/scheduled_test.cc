// Scheduled plans (runtime/plan/plan_scheduler.h, runtime/plan/executable_plan.h): a program that
// calls the step markers gets the plan of OVERLAP_PLANNER, made by rank 0 from the measured steps
// and adopted by every rank at the same step. Every step's sums must be exact before, during and
// after the switch, whatever the planner slices, fuses, reorders or splits into reduce-scatter and
// allgather. Run once per planner (tests/runtime/BUILD sets OVERLAP_PLANNER), for some with every
// bucket compressed to fp16 (OVERLAP_COMPRESSION), and for some on pretend hosts of two ranks with
// every allreduce bucket two-stage (OVERLAP_TWO_STAGE=on).
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/overlap.h"
#include "tests/runtime/agreed.h"
#include "tests/runtime/gradient_options.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);

bool PlannerIs(const char* planner) {
  const char* set = std::getenv("OVERLAP_PLANNER");
  return set != nullptr && std::string(set) == planner;
}

// A drift's re-plan check keeps the plan in force: wfbp makes it again whatever the compute;
// otherwise, with the gain OVERLAP_REPLAN_MIN_GAIN not 0, no plan made from the drifted step is
// worth a drop (mgwfbp's plan made again, which OVERLAP_TEST_REPLAN_DIFFERS counts as another,
// is simulated no faster than the plan in force).
bool DriftKeepsThePlan() {
  const char* gain = std::getenv("OVERLAP_REPLAN_MIN_GAIN");
  return PlannerIs("wfbp") || (PlannerIs("mgwfbp") && (gain == nullptr || std::atof(gain) > 0));
}

// Rank r contributes r + step + (i % 5) at element i; sums stay exact in float.
float Value(int rank, int step, size_t i) {
  return static_cast<float>(rank + step + static_cast<int>(i % 5));
}
float Average(int step, size_t i, int size) {
  return static_cast<float>((size - 1) / 2.0 + step + static_cast<int>(i % 5));
}

struct Layer {
  std::string name;
  std::vector<float> grad;
  Handle handle;
  bool pending = false;
};

// A small synthetic model: sizes from 3 elements to 1.5 MB, so that planners fuse the small
// ones and slice the large ones.
std::vector<Layer> MakeModel() {
  const std::vector<int64_t> sizes = {3, 1000, 250000, 17, 400000, 64, 4096, 131072, 5};
  std::vector<Layer> layers;
  for (size_t l = 0; l < sizes.size(); ++l) {
    layers.push_back(Layer{absl::StrCat("layer", l, ".weight"),
                           std::vector<float>(static_cast<size_t>(sizes[l])), Handle(), false});
  }
  return layers;
}

std::string Check(Layer& layer, int step) {
  absl::Status s = layer.handle.Wait(kWait);
  layer.pending = false;
  if (!s.ok()) return std::string(s.message());
  for (size_t i = 0; i < layer.grad.size(); ++i) {
    if (layer.grad[i] != Average(step, i, Size())) {
      return absl::StrCat(layer.name, "[", i, "] = ", layer.grad[i], " at step ", step,
                          ", expected ", Average(step, i, Size()));
    }
  }
  return "";
}

// One step in DDP/ByteScheduler style: each layer waits for its previous gradient right before
// its forward; gradients are submitted as backward produces them (last layer first). `slow`
// adds 60 ms to each layer's backward.
std::string Step(std::vector<Layer>& layers, int step, bool slow = false) {
  if (!StartForward().ok()) return "StartForward failed";
  for (Layer& layer : layers) {
    if (layer.pending) {
      std::string error = Check(layer, step - 1);
      if (!error.empty()) return error;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  if (!StartBackward().ok()) return "StartBackward failed";
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    std::this_thread::sleep_for(std::chrono::microseconds(slow ? 60600 : 600));
    for (size_t i = 0; i < it->grad.size(); ++i) it->grad[i] = Value(Rank(), step, i);
    const int64_t n = static_cast<int64_t>(it->grad.size());
    absl::StatusOr<Handle> h = Allreduce(
        it->name, testing::GradientTensor(it->name, it->grad.data(), n),
        testing::GradientTensor(it->name, it->grad.data(), n), testing::GradientOptions());
    if (!h.ok()) return std::string(h.status().message());
    it->handle = *h;
    it->pending = true;
  }
  if (!StartUpdate().ok()) return "StartUpdate failed";
  return "";
}

TEST_CASE("a damaged plan is refused on every rank and training goes on", "[corrupt]") {
  // OVERLAP_TEST_CORRUPT_PLAN makes rank 0 damage the plan it broadcasts (plan_scheduler.cc).
  const char* how = std::getenv("OVERLAP_TEST_CORRUPT_PLAN");
  if (how == nullptr || std::getenv("OVERLAP_TEST_DRIFT") != nullptr) return;
  std::vector<Layer> layers = MakeModel();
  int step = 0;
  for (; step < 20; ++step) REQUIRE(Step(layers, step) == "");
  for (Layer& layer : layers) {
    if (layer.pending) REQUIRE(Check(layer, step - 1) == "");
  }
  const RuntimeStats stats = Stats();
  INFO("rank " << Rank() << ": " << how);
  REQUIRE(stats.plans_refused == 1);
  REQUIRE(stats.plans_scheduled == 0);
  REQUIRE(stats.planner == "");
  REQUIRE(stats.plans_frozen >= 1);  // the observed plan carries on
}

TEST_CASE("a step that slows down for good is planned again, every sum exact", "[drift]") {
  // OVERLAP_TEST_DRIFT (tests/runtime/BUILD): backward becomes 0.5 s longer 14 steps after
  // adoption; the drift checks (OVERLAP_REPLAN_DRIFT) must drop the plan (the re-plan check
  // counts the plan as changed: OVERLAP_TEST_REPLAN_DIFFERS) and a new one must be adopted.
  if (std::getenv("OVERLAP_TEST_DRIFT") == nullptr) return;
  if (std::getenv("OVERLAP_TEST_SLOW_TRIALS") != nullptr) return;  // the case below
  if (DriftKeepsThePlan()) return;                                 // the next case
  std::vector<Layer> layers = MakeModel();
  int64_t first_adopted = -1;
  bool saw_dropped = false;
  int step = 0;
  for (; step < 120 && testing::AgreedMax(Stats().plans_scheduled) < 2; ++step) {
    const bool slow = first_adopted >= 0 && Stats().steps > first_adopted + 14;
    INFO("rank " << Rank() << " step " << step);
    REQUIRE(Step(layers, step, slow) == "");
    if (first_adopted < 0) first_adopted = testing::AgreedMax(Stats().plan_adopted_step);
    const RuntimeStats now = Stats();
    if (first_adopted >= 0 && now.plans_dropped > 0 && now.planner.empty()) {
      // Between the drop and the next plan, Stats() reports none in force, nothing of the old one.
      saw_dropped = true;
      CHECK(now.plan_buckets == 0);
      CHECK(now.predicted_step_ms == 0);
      CHECK(!now.plan_layerwise_update);
      CHECK(now.plan_mean_staleness == 0);
      CHECK(now.plan_update_cycle == 1);
    }
  }
  for (Layer& layer : layers) {
    if (layer.pending) REQUIRE(Check(layer, step - 1) == "");
  }
  CHECK(saw_dropped);  // a re-plan takes OVERLAP_PROFILE_STEPS + 2 steps or more
  const RuntimeStats stats = Stats();
  INFO("rank " << Rank() << ": first adopted at " << first_adopted << ", now at "
               << stats.plan_adopted_step << ", " << stats.plans_dropped << " dropped");
  REQUIRE(first_adopted >= 0);
  REQUIRE(stats.plans_scheduled == 2);
  REQUIRE(stats.plan_adopted_step > first_adopted + 14);
  // Two plannings: the first fitted the link cost; the second fitted it again or, where the
  // collectives measured since agreed with it (only the compute slowed), kept it.
  INFO("link cost fits " << stats.link_cost_fits << ", kept " << stats.link_cost_reuses);
  REQUIRE(stats.link_cost_fits >= 1);
  REQUIRE(stats.link_cost_fits + stats.link_cost_reuses == 2);
}

TEST_CASE("a drift that plans no better plan keeps the plan in force, nothing dropped", "[drift]") {
  // OVERLAP_TEST_DRIFT under wfbp (one bucket per tensor, whatever the compute), or under
  // mgwfbp with OVERLAP_TEST_REPLAN_DIFFERS (the plan made from the slow steps counts as
  // another, and replaces the plan in force only if simulated 5% faster on them, which it is
  // not): backward becomes 0.5 s
  // longer 14 steps after adoption; the drift checks find it, rank 0 plans from the drifted
  // steps, and every rank keeps the plan: no drop, no second adoption, every sum exact
  // throughout (plan_scheduler.h, step 3).
  if (std::getenv("OVERLAP_TEST_DRIFT") == nullptr || !DriftKeepsThePlan()) return;
  std::vector<Layer> layers = MakeModel();
  int64_t first_adopted = -1;
  int64_t dropped_then = -1;  // plans dropped when the plan was adopted (the observed one's)
  double first_predicted = 0;
  int step = 0;
  for (; step < 120 && testing::AgreedMax(Stats().plan_drifts_kept) < 1; ++step) {
    const bool slow = first_adopted >= 0 && Stats().steps > first_adopted + 14;
    INFO("rank " << Rank() << " step " << step);
    REQUIRE(Step(layers, step, slow) == "");
    if (first_adopted < 0) {
      first_adopted = testing::AgreedMax(Stats().plan_adopted_step);
      if (first_adopted >= 0) {
        dropped_then = Stats().plans_dropped;
        first_predicted = Stats().predicted_step_ms;
      }
    }
  }
  // A few slow steps more under the kept plan.
  for (int more = 0; more < 5; ++more, ++step) REQUIRE(Step(layers, step, true) == "");
  for (Layer& layer : layers) {
    if (layer.pending) REQUIRE(Check(layer, step - 1) == "");
  }
  const RuntimeStats stats = Stats();
  INFO("rank " << Rank() << ": adopted at " << first_adopted << ", now " << stats.planner
               << " adopted at " << stats.plan_adopted_step << "; " << stats.plans_dropped
               << " dropped, " << stats.plan_drifts_kept << " drifts kept");
  REQUIRE(first_adopted >= 0);
  REQUIRE(stats.plan_drifts_kept == 1);
  REQUIRE(stats.plans_scheduled == 1);
  REQUIRE(stats.plan_adopted_step == first_adopted);
  REQUIRE(stats.plans_dropped == dropped_then);
  REQUIRE(stats.planner == std::getenv("OVERLAP_PLANNER"));
  // The kept plan's prediction is made for the slow steps now (0.5 s more backward).
  REQUIRE(stats.predicted_step_ms > first_predicted + 300);
}

TEST_CASE("auto that kept the observed plan plans again when the step drifts", "[drift]") {
  // OVERLAP_TEST_DRIFT with OVERLAP_TEST_SLOW_TRIALS=all under auto: every trial runs slow steps,
  // so auto keeps the observed plan; 14 steps later backward becomes 0.5 s longer for good, and
  // the drift checks that follow the kept observed plan must start auto again: candidates
  // adopted for new trials, whichever plan these then keep.
  if (std::getenv("OVERLAP_TEST_DRIFT") == nullptr) return;
  const char* slow_spec = std::getenv("OVERLAP_TEST_SLOW_TRIALS");
  if (slow_spec == nullptr || std::string(slow_spec) != "all") return;
  std::vector<Layer> layers = MakeModel();
  int64_t kept_at = -1;         // the step at which every rank had kept the observed plan
  int64_t scheduled_then = -1;  // candidates adopted by then
  bool trying = false;
  int step = 0;
  for (; step < 200; ++step) {
    const bool slow = trying || (kept_at >= 0 && step > kept_at + 14);
    INFO("rank " << Rank() << " step " << step);
    REQUIRE(Step(layers, step, slow) == "");
    trying = testing::AgreedMax(Stats().plan_trials_pending ? 1 : 0) != 0;
    const bool kept = testing::AgreedMax(Stats().planner == "auto:observed" ? 0 : 1) == 0;
    if (kept_at < 0 && kept && !trying) {
      kept_at = step;
      scheduled_then = Stats().plans_scheduled;
      REQUIRE(scheduled_then >= 1);
    }
    // Planned again, and the new trials are over.
    if (kept_at >= 0 && testing::AgreedMax(Stats().plans_scheduled) > scheduled_then && !trying &&
        step > kept_at + 14) {
      ++step;  // the step just run is the last
      break;
    }
  }
  for (Layer& layer : layers) {
    if (layer.pending) REQUIRE(Check(layer, step - 1) == "");
  }
  const RuntimeStats stats = Stats();
  INFO("rank " << Rank() << ": kept the observed plan at step " << kept_at << " after "
               << scheduled_then << " candidates; now planner '" << stats.planner << "', "
               << stats.plans_scheduled << " candidates adopted, trials " << stats.plan_trials);
  REQUIRE(kept_at >= 0);
  REQUIRE(stats.plans_scheduled > scheduled_then);
  REQUIRE_FALSE(stats.plan_trials_pending);
  // The new trials measured the observed plan first, under the slower step.
  REQUIRE(absl::StartsWith(stats.plan_trials, "auto:observed "));
  REQUIRE(absl::StartsWith(stats.planner, "auto:"));
}

TEST_CASE("a rank stuck before a plan vote's marker ends the job on every rank", "[stuck]") {
  // OVERLAP_TEST_STUCK_AT_STEP = S (scheduled_stuck_before_vote_test.sh): rank 1 stops before
  // the forward marker of its loop step S, waiting on an allreduce rank 0 never submits, while
  // rank 0 starts that marker's plan vote (the runtime counts markers from 1: S + 1 is the first
  // attempt, OVERLAP_PLAN_AFTER_STEPS + OVERLAP_PROFILE_STEPS + 2). Rank 0 holds every negotiation
  // round while that vote is out (PlanScheduler::holds_rounds), so the stall inspector cannot fail
  // the lone allreduce; the vote's own deadline must end the job. The script reads what each rank
  // prints.
  const char* at = std::getenv("OVERLAP_TEST_STUCK_AT_STEP");
  if (at == nullptr) return;
  const int stuck_step = std::atoi(at);
  std::vector<Layer> layers = MakeModel();
  absl::Time since = absl::InfiniteFuture();  // when this rank reached step S
  const auto report = [&](const std::string& what) {
    std::printf("stuck: rank %d: %s after %.1f s: %s\n", Rank(), what.c_str(),
                absl::ToDoubleSeconds(absl::Now() - since), Stats().planner.c_str());
    std::fflush(stdout);
  };
  for (int step = 0; step < stuck_step + 20; ++step) {
    if (step == stuck_step) since = absl::Now();
    if (step == stuck_step && Rank() == 1) {
      std::vector<float> lone(16, 1.0f);
      absl::StatusOr<Handle> h = Allreduce(
          "lone.weight", testing::GradientTensor("lone.weight", lone.data(), 16),
          testing::GradientTensor("lone.weight", lone.data(), 16), testing::GradientOptions());
      REQUIRE(h.ok());
      const absl::Status s = h->Wait(absl::Seconds(110));
      report(absl::StrCat("the lone allreduce returned (", s.message(), ")"));
      return;
    }
    const std::string error = Step(layers, step);
    if (!error.empty()) {
      report(absl::StrCat("step ", step, " failed (", error, ")"));
      return;
    }
  }
  report("every step passed");
}

TEST_CASE("a scheduled plan is adopted by every rank and keeps every sum exact") {
  const char* planner = std::getenv("OVERLAP_PLANNER");
  REQUIRE(planner != nullptr);
  if (std::getenv("OVERLAP_TEST_CORRUPT_PLAN") != nullptr) return;
  if (std::getenv("OVERLAP_TEST_DRIFT") != nullptr) return;
  if (std::getenv("OVERLAP_TEST_STUCK_AT_STEP") != nullptr) return;
  std::vector<Layer> layers = MakeModel();
  int step = 0;
  int64_t adopted = -1;
  bool trying = false;  // auto still trying its candidates (OVERLAP_AUTO_TRIALS)
  // OVERLAP_TEST_SLOW_TRIALS=1: the steps before the first plan and every trial after auto's
  // first run slow, so the first candidate beats both the observed plan and the later
  // candidates, and must be adopted again at the end. =all: every trial runs slow steps, so the
  // observed plan beats every candidate and must be learned again and kept.
  const char* slow_spec = std::getenv("OVERLAP_TEST_SLOW_TRIALS");
  const bool slow_later_trials = slow_spec != nullptr && std::string(slow_spec) == "1";
  const bool slow_every_trial = slow_spec != nullptr && std::string(slow_spec) == "all";
  // The trials measured so far, the observed plan's entry aside.
  const auto candidates_tried = [] {
    const std::string trials = Stats().plan_trials;
    int tried = 0;
    for (absl::string_view trial : absl::StrSplit(trials, ", ", absl::SkipEmpty())) {
      if (!absl::StartsWith(trial, "auto:observed ")) ++tried;
    }
    return tried;
  };
  // OVERLAP_TEST_UNSTEADY_TRIALS: while auto tries its candidates, every step is followed by a
  // forward marker with no backward, which leaves that step unmeasured
  // (runtime/plan/step_profiler.h), so no trial can be measured.
  const bool unsteady_trials = std::getenv("OVERLAP_TEST_UNSTEADY_TRIALS") != nullptr;
  int64_t scheduled_at_first_trial = -1;
  for (; step < 120 && (adopted < 0 || trying || step < adopted + 8); ++step) {
    const bool slow = (slow_later_trials && (adopted < 0 || (trying && candidates_tried() > 0))) ||
                      (slow_every_trial && trying);
    const std::string error = Step(layers, step, slow);
    INFO("rank " << Rank() << " step " << step);
    REQUIRE(error == "");
    if (unsteady_trials && trying) {
      if (scheduled_at_first_trial < 0) scheduled_at_first_trial = Stats().plans_scheduled;
      REQUIRE(StartForward().ok());
    }
    adopted = testing::AgreedMax(Stats().plan_adopted_step);
    trying = testing::AgreedMax(Stats().plan_trials_pending ? 1 : 0) != 0;
  }
  for (Layer& layer : layers) {
    if (layer.pending) REQUIRE(Check(layer, step - 1) == "");
  }
  const RuntimeStats stats = Stats();
  INFO("rank " << Rank() << ": planner '" << stats.planner << "', " << stats.plan_buckets
               << " buckets, adopted at step " << stats.plan_adopted_step);
  REQUIRE_FALSE(stats.plan_trials_pending);
  // auto measured the observed plan faster than every candidate: the observed plan runs again.
  const bool kept_observed = stats.planner == "auto:observed";
  if (unsteady_trials) {
    // The trials gave up: no candidate measured (the observed plan's step, from before, is
    // all the report holds), and the first candidate stayed in force.
    REQUIRE(scheduled_at_first_trial == 1);
    REQUIRE(candidates_tried() == 0);
    REQUIRE_FALSE(kept_observed);
    REQUIRE(stats.plans_scheduled == 1);
  } else if (std::string(planner) == "auto" && !stats.plan_trials.empty()) {
    // Each trial adopted a candidate, and the fastest measured one may have been adopted again;
    // it is the plan in force.
    const std::vector<std::string> trials = absl::StrSplit(stats.plan_trials, ", ");
    INFO("trials: " << stats.plan_trials);
    REQUIRE(trials.size() >= 2);
    // The runtime compares unrounded times; trials printed alike (0.1 ms) may be either way.
    std::vector<std::pair<std::string, double>> measured;
    double fastest_ms = 0;
    for (const std::string& trial : trials) {
      const std::vector<std::string> parts = absl::StrSplit(trial, ' ');
      REQUIRE(parts.size() == 3);
      double ms = 0;
      REQUIRE(absl::SimpleAtod(parts[1], &ms));
      REQUIRE(ms > 0);
      if (measured.empty() || ms < fastest_ms) fastest_ms = ms;
      measured.emplace_back(parts[0], ms);
    }
    // The plan it started from was measured first (this model's best plan is synchronous).
    REQUIRE(measured.front().first == "auto:observed");
    const int64_t candidates = static_cast<int64_t>(measured.size()) - 1;
    bool adopted_a_fastest = false;
    for (const auto& [name, ms] : measured) {
      if (name == stats.planner && ms == fastest_ms) adopted_a_fastest = true;
    }
    REQUIRE(adopted_a_fastest);
    if (kept_observed) {
      // Each candidate ran once, none again.
      REQUIRE(stats.plans_scheduled == candidates);
    } else {
      REQUIRE(stats.plans_scheduled >= candidates);
      REQUIRE(stats.plans_scheduled <= candidates + 1);
    }
    if (slow_later_trials) {
      REQUIRE(stats.planner == measured[1].first);
      REQUIRE(stats.plans_scheduled == candidates + (candidates > 1 ? 1 : 0));
    }
    if (slow_every_trial) REQUIRE(kept_observed);
  } else {
    const char* trials = std::getenv("OVERLAP_AUTO_TRIALS");
    if (trials != nullptr && std::string(trials) == "1") REQUIRE(stats.plan_trials.empty());
    REQUIRE(stats.plans_scheduled == 1);
  }
  REQUIRE(stats.plans_refused == 0);
  if (kept_observed) {
    REQUIRE(stats.plan_buckets == 0);
    REQUIRE(stats.predicted_step_ms == 0);
    REQUIRE(stats.planned_units > 0);  // the observed plan, learned again
  } else {
    REQUIRE(stats.plan_buckets > 0);
    REQUIRE(stats.predicted_step_ms > 0);
  }
  REQUIRE(stats.fitted_beta_us_per_mb > 0);
  // OVERLAP_TEST_PROBE_STALL_MS: the first latency probe ran slow, as beside busy training
  // processes; the latency is taken from the second, quiet one (runtime/plan/plan_link_cost.cc),
  // which took well under a millisecond here.
  if (const char* stall_ms = std::getenv("OVERLAP_TEST_PROBE_STALL_MS"); stall_ms != nullptr) {
    INFO("fitted latency " << stats.fitted_alpha_us << " us, the first probe stalled " << stall_ms
                           << " ms a run");
    REQUIRE(stats.fitted_alpha_us < 1e3 * std::atof(stall_ms) / 4);
  }
  if (std::string(planner) == "auto") {
    REQUIRE(stats.planner.rfind("auto:", 0) == 0);
  } else {
    REQUIRE(stats.planner == planner);
  }
  // After adoption every bucket of every step runs planned, with no plan dropped.
  const int64_t launches_before = stats.planned_launches;
  for (int extra = 0; extra < 5; ++extra, ++step) REQUIRE(Step(layers, step) == "");
  for (Layer& layer : layers) {
    if (layer.pending) REQUIRE(Check(layer, step - 1) == "");
  }
  REQUIRE(Stats().planned_launches - launches_before >=
          4 * (kept_observed ? stats.planned_units : stats.plan_buckets));
  if (kept_observed) REQUIRE(Stats().plans_scheduled == stats.plans_scheduled);  // no more plans
  // OVERLAP_TEST_EXPECT_PLAN_BUCKETS: "n", or ">=n" (OVERLAP_DEVICE_BUCKET_US's rows in BUILD).
  if (const char* expect = std::getenv("OVERLAP_TEST_EXPECT_PLAN_BUCKETS")) {
    const bool at_least = absl::StartsWith(expect, ">=");
    int n = 0;
    REQUIRE(absl::SimpleAtoi(at_least ? expect + 2 : expect, &n));
    INFO("plan buckets " << stats.plan_buckets << ", expected " << expect);
    if (at_least) {
      REQUIRE(stats.plan_buckets >= n);
    } else {
      REQUIRE(stats.plan_buckets == n);
    }
  }
  if (testing::GradientDevice().is_cuda()) {
    // The device path ran: the CUDA plane on the proxy's executor, buckets packed on the device.
    REQUIRE(
        Stats().cuda_executor ==
        (std::getenv("OVERLAP_TEST_PROXY_STAGED") != nullptr ? "mpi+host-staging" : "proxy+mpi"));
    // Planners that slice pack into buffers (one whole tensor alone is reduced in place): on the
    // device only, or, with host and device gradients mixed, on either (the sliced ones may all
    // be on one side). bytescheduler's device rows pin a partition small enough to cut this
    // model's tensors (DEVICE_PACKING_ENV in tests/runtime/BUILD); tuned, it may cut none.
    const std::string name = planner;
    const bool packs = name == "bytescheduler" || name == "usbyte" || name == "dear";
    if (testing::GradientDevicesMixed()) {
      if (packs) REQUIRE(Stats().plan_device_buffer_bytes + Stats().plan_buffer_bytes > 0);
    } else {
      REQUIRE(Stats().plan_buffer_bytes == 0);
      if (packs) REQUIRE(Stats().plan_device_buffer_bytes > 0);
    }
  }
  REQUIRE(Stats().plans_dropped == stats.plans_dropped);
  REQUIRE(Stats().planner == stats.planner);
  // OVERLAP_COMPRESSION=fp16 (tests/runtime/BUILD): every bucket of the plan compressed, and the
  // sums above still exact (small integers are exact in fp16, so the residuals stay zero). The
  // snapshot holds two residuals per element: each tensor's own, from the negotiated steps before
  // the plan, and its buckets', which the plan's compressed buckets made.
  const char* compression = std::getenv("OVERLAP_COMPRESSION");
  if (compression != nullptr && std::string(compression) != "none") {
    REQUIRE(stats.plan_compressed_buckets == stats.plan_buckets);
    size_t elements = 0;
    for (const Layer& layer : layers) elements += layer.grad.size();
    absl::StatusOr<std::string> residuals = SaveCompressionState();
    REQUIRE(residuals.ok());
    // Back on the observed plan, the scheduled buckets' residuals were freed with their plan.
    REQUIRE(residuals->size() >= (kept_observed ? 1 : 2) * 4 * elements);
    // And no more: a plan replaced on the way (auto's trials) left no residuals behind.
    INFO("plans scheduled: " << stats.plans_scheduled);
    REQUIRE(residuals->size() < 3 * 4 * elements);
  } else {
    REQUIRE(stats.plan_compressed_buckets == 0);
  }
  // Pretend hosts (OVERLAP_TEST_RANKS_PER_HOST) with OVERLAP_TWO_STAGE=on (tests/runtime/BUILD):
  // the two-stage form was fitted beside the flat one, every allreduce bucket of the plan ran
  // two-stage (dear's reduce-scatters and allgathers stay one-level), and the sums above are
  // exact. Otherwise no bucket is two-stage: one pretend host, or none set.
  const char* two_stage = std::getenv("OVERLAP_TWO_STAGE");
  const bool hosts_shared = std::getenv("OVERLAP_TEST_RANKS_PER_HOST") != nullptr;
  if (two_stage != nullptr && std::string(two_stage) == "on" && hosts_shared && !kept_observed) {
    REQUIRE(stats.fitted_two_stage_beta_us_per_mb > 0);
    if (std::string(planner) != "dear" && stats.planner != "auto:dear") {
      REQUIRE(stats.plan_two_stage_buckets == stats.plan_buckets - stats.plan_compressed_buckets);
    }
  } else if (!hosts_shared) {
    REQUIRE(stats.plan_two_stage_buckets == 0);
    REQUIRE(stats.fitted_two_stage_beta_us_per_mb == 0);
  }
}

}  // namespace
}  // namespace overlap
