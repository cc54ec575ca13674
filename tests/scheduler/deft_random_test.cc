// deft at staleness 0 and max period 1 against the synchronous planners on seeded random
// profiles and links (issue 36): its plan must never be more than 1% slower, by the same
// simulator, than the best plan of wfbp, fusion, mgwfbp, bytescheduler, usbyte and dear.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/cost_model.h"
#include "scheduler/planner.h"
#include "scheduler/profile.h"
#include "scheduler/simulator.h"
#include "tests/scheduler/test_util.h"

namespace overlap::sched {
namespace {

// One seeded case: a model-like profile and a ring link.
struct RandomCase {
  Profile profile;
  CostModel cost;
  std::string link;  // for the failure message
};

double LogUniform(std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
  return std::exp(u(rng));
}

// Ranges from the bundled profiles (scheduler/profiles/*.json): 8 to 400 layers, a weight per
// layer from a few KB to a few hundred MB plus small biases and norms, 30 to 1500 ms of compute
// with backward 1.3 to 2.5 x forward, and an SGD-with-momentum update of 5 to 20 ms per GB. Layer
// times follow the layer's bytes (transformers) to a random degree, down to not at all (CNNs,
// whose early layers compute most on the fewest parameters). Links: 8 to 64 workers, 1 to 100
// Gbit/s, 2 to 50 us per message step. `large` draws at least 40 layers and a largest weight of
// at least 20 MB: mostly models of 0.3 to 5 GB, where deft used to miss (docs/scheduler.md).
RandomCase MakeRandomCase(uint32_t seed, bool large) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  RandomCase c;
  Profile& p = c.profile;
  p.model = std::string(large ? "large-" : "random-") + std::to_string(seed);
  const int layers = static_cast<int>(LogUniform(rng, large ? 40 : 8, 400));
  const double max_weight_bytes = LogUniform(rng, large ? 2e7 : 1e6, 4e8);
  const double size_coupling = u(rng);
  std::vector<double> forward_weight;
  std::vector<std::vector<std::pair<std::string, int64_t>>> tensors(static_cast<size_t>(layers));
  double total_bytes = 0;
  for (int l = 0; l < layers; ++l) {
    auto& list = tensors[static_cast<size_t>(l)];
    const std::string name = "l" + std::to_string(l);
    double layer_bytes = 0;
    if (u(rng) < 0.8 || l == 0) {  // the others: activations, pooling (no parameters)
      const int64_t weight = 4 * static_cast<int64_t>(LogUniform(rng, 256, max_weight_bytes / 4));
      list.emplace_back(name + ".weight", weight);
      layer_bytes += static_cast<double>(weight);
      const int extra = static_cast<int>(rng() % 3);  // bias, norm scale and shift
      for (int k = 0; k < extra; ++k) {
        const int64_t small = 4 * static_cast<int64_t>(LogUniform(rng, 16, 8192));
        list.emplace_back(name + ".p" + std::to_string(k), small);
        layer_bytes += static_cast<double>(small);
      }
    }
    total_bytes += layer_bytes;
    forward_weight.push_back(std::pow(std::max(layer_bytes, 1e4), size_coupling) *
                             LogUniform(rng, 0.3, 3));
  }
  const double forward_ms = LogUniform(rng, 10, 600);
  const double backward_ratio = 1.3 + 1.2 * u(rng);
  double weight_sum = 0;
  for (double w : forward_weight) weight_sum += w;
  for (int l = 0; l < layers; ++l) {
    const double fwd = forward_ms * forward_weight[static_cast<size_t>(l)] / weight_sum;
    p.AddLayer("l" + std::to_string(l), fwd, fwd * backward_ratio * (0.8 + 0.4 * u(rng)),
               tensors[static_cast<size_t>(l)]);
  }
  p.update_ms = total_bytes * 1e-9 * (5 + 15 * u(rng));
  REQUIRE(p.Finalize().ok());

  const int workers = 8 + static_cast<int>(rng() % 57);
  const double gbit = LogUniform(rng, 1, 100);
  const double latency_us = LogUniform(rng, 2, 50);
  c.cost = CostModel::Algorithmic(Algorithm::kRing, workers, latency_us, gbit);
  std::ostringstream link;
  link << "ring of " << workers << " workers, " << gbit << " Gbit/s, " << latency_us << " us";
  c.link = link.str();
  return c;
}

std::string Summary(const RandomCase& c) {
  const Profile& p = c.profile;
  std::ostringstream out;
  out << p.layers.size() << " layers, " << p.tensors.size() << " tensors, "
      << static_cast<double>(p.total_bytes) / 1e6 << " MB; forward " << p.forward_ms
      << " ms, backward " << p.backward_ms << " ms, update " << p.update_ms << " ms; " << c.link;
  return out.str();
}

double SimulatedMs(const std::string& planner, const RandomCase& c, const PlannerOptions& o) {
  absl::StatusOr<Plan> plan = MakePlan(planner, c.profile, c.cost, o);
  INFO(planner << ": " << plan.status().message());
  REQUIRE(plan.ok());
  absl::StatusOr<SimResult> sim = Simulate(c.profile, *plan, c.cost);
  INFO(planner << ": " << sim.status().message());
  REQUIRE(sim.ok());
  return sim->iteration_ms;
}

// The seeds: 1 .. 200, every other one a large model, then the worst miss of the planner before
// it took every synchronous planner's plan as a seed, found in a search of about 1700 seeds
// (large 8159: 2.8% behind ByteScheduler; within the first 200 every gap was under 1%).
std::vector<std::pair<uint32_t, bool>> Seeds() {
  std::vector<std::pair<uint32_t, bool>> seeds;
  for (uint32_t seed = 1; seed <= 200; ++seed) seeds.emplace_back(seed, seed % 2 == 0);
  seeds.emplace_back(8159, true);
  return seeds;
}

TEST_CASE(
    "deft at staleness 0 and period 1 is within 1% of the best synchronous planner on 200 "
    "random profiles",
    "[deft]") {
  const std::vector<std::string> synchronous = {"wfbp",          "fusion", "mgwfbp",
                                                "bytescheduler", "usbyte", "dear"};
  PlannerOptions deft_options;
  deft_options.staleness = 0;
  deft_options.max_period = 1;
  const std::vector<std::pair<uint32_t, bool>> seeds = Seeds();
  double worst_ratio = 0;
  std::string worst_case;
  for (size_t i = 0; i < seeds.size(); ++i) {
    // Instrumented, one seed in sixteen (small and large alike): the sanitizers look for memory
    // and threading faults in the planners, which a dozen profiles reach; the gap bound itself
    // is checked on every seed uninstrumented.
    if (!testing::RunsUnderSanitizer(i, 16)) continue;
    const auto [seed, large] = seeds[i];
    const RandomCase c = MakeRandomCase(seed, large);
    double best_ms = std::numeric_limits<double>::infinity();
    std::string best_name;
    for (const std::string& name : synchronous) {
      const double ms = SimulatedMs(name, c, {});
      if (ms < best_ms) {
        best_ms = ms;
        best_name = name;
      }
    }
    const double deft_ms = SimulatedMs("deft", c, deft_options);
    const double ratio = deft_ms / best_ms;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst_case = c.profile.model;
    }
    INFO("seed " << c.profile.model << ": " << Summary(c) << "; deft " << deft_ms
                 << " ms, best synchronous " << best_name << " " << best_ms << " ms (" << ratio
                 << "x)");
    CHECK(deft_ms <= 1.01 * best_ms);
  }
  // Shown with -s.
  WARN("worst deft / best synchronous: " << worst_ratio << "x (" << worst_case << ")");
}

}  // namespace
}  // namespace overlap::sched
