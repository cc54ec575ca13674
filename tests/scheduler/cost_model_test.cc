#include "scheduler/cost_model.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

namespace overlap::sched {
namespace {

TEST_CASE("Ring, tree and recursive-doubling closed forms") {
  const double m = 100e6;                                               // bytes
  CostModel ring = CostModel::Algorithmic(Algorithm::kRing, 8, 10, 8);  // 10 us, 1 GB/s
  const double per = m / 1e9;
  CHECK(ring.channels[0].Seconds(Collective::kAllreduce, m) ==
        Approx(2 * 7 * 10e-6 + 2 * 7.0 / 8 * per));
  CHECK(ring.channels[0].Seconds(Collective::kReduceScatter, m) ==
        Approx(7 * 10e-6 + 7.0 / 8 * per));
  // Ring allreduce = reduce-scatter + allgather.
  CHECK(ring.channels[0].Seconds(Collective::kAllreduce, m) ==
        Approx(ring.channels[0].Seconds(Collective::kReduceScatter, m) +
               ring.channels[0].Seconds(Collective::kAllgather, m)));
  CostModel rd = CostModel::Algorithmic(Algorithm::kRecursiveDoubling, 8, 10, 8);
  CHECK(rd.channels[0].Seconds(Collective::kAllreduce, m) == Approx(3 * (10e-6 + per)));
  CHECK(rd.channels[0].Seconds(Collective::kAllgather, m) == Approx(3 * 10e-6 + 7.0 / 8 * per));
  CostModel tree = CostModel::Algorithmic(Algorithm::kTree, 8, 10, 8);
  CHECK(tree.channels[0].Seconds(Collective::kAllreduce, m) == Approx(2 * 3 * (10e-6 + per)));
  // Non-power-of-two counts round the step count up.
  CHECK(CostModel::Algorithmic(Algorithm::kTree, 5, 10, 8)
            .channels[0]
            .Seconds(Collective::kAllreduce, 0) == Approx(2 * 3 * 10e-6));
  // One worker exchanges nothing.
  CHECK(CostModel::Algorithmic(Algorithm::kRing, 1, 10, 8)
            .channels[0]
            .Seconds(Collective::kAllreduce, m) == 0);
  // Infinite bandwidth leaves the latency terms.
  CostModel inf =
      CostModel::Algorithmic(Algorithm::kRing, 4, 5, std::numeric_limits<double>::infinity());
  CHECK(inf.channels[0].Seconds(Collective::kAllreduce, 1e9) == Approx(6 * 5e-6));
  CHECK(inf.WithWorkers(16).channels[0].workers == 16);
}

TEST_CASE("Hierarchical closed form: pipelined host, cross-host and host phases") {
  // 4 hosts of 2 ranks; NIC 10 us and 1 GB/s, within the host 1 us and 10 GB/s.
  const CostModel model = CostModel::Hierarchical(8, 2, 10, 8, 1, 80);
  REQUIRE(model.Validate().ok());
  const ChannelCost& c = model.channels[0];
  // One segment (1 MB): reduce-scatter within the host, allreduce across 4 hosts of the shard
  // (2 flows of s/2 share the NIC: 2(H-1)/H s/B), allgather within the host.
  const double s = 1e6;
  const double local = 1e-6 + 0.5 * s / 10e9;
  const double cross = 2 * 3 * 10e-6 + 2 * 3.0 / 4 * s / 1e9;
  CHECK(c.Seconds(Collective::kAllreduce, s) == Approx(2 * local + cross));
  // 40 MiB: 5 segments of 8 MiB; the network lane sets the pace after the first.
  const double m = 40.0 * 1024 * 1024, seg = m / 5;
  const double seg_local = 1e-6 + 0.5 * seg / 10e9;
  const double seg_cross = 2 * 3 * 10e-6 + 2 * 3.0 / 4 * seg / 1e9;
  CHECK(c.Seconds(Collective::kAllreduce, m) == Approx(2 * seg_local + seg_cross + 4 * seg_cross));
  // Reduce-scatter and allgather stay flat rings over the 8 ranks.
  CHECK(c.Seconds(Collective::kReduceScatter, m) == Approx(7 * 10e-6 + 7.0 / 8 * m / 1e9));
  // Against a flat ring on the same NICs, it moves 2(H-1)/H instead of 2(N-1)/N of the buffer.
  const double flat = CostModel::Algorithmic(Algorithm::kRing, 8, 10, 8)
                          .channels[0]
                          .Seconds(Collective::kAllreduce, m);
  CHECK(c.Seconds(Collective::kAllreduce, m) < flat);
  // One rank per host is a flat ring of the hosts.
  CHECK(
      CostModel::Hierarchical(4, 1, 10, 8, 1, 80).channels[0].Seconds(Collective::kAllreduce, s) ==
      Approx(CostModel::Algorithmic(Algorithm::kRing, 4, 10, 8)
                 .channels[0]
                 .Seconds(Collective::kAllreduce, s)));
  CHECK(*ParseAlgorithm("hierarchical") == Algorithm::kHierarchical);
  CHECK_THAT(std::string(CostModel::Hierarchical(6, 4, 10, 8, 1, 80).Validate().message()),
             Catch::Contains("4 ranks per host do not divide 6 workers"));
  CHECK_THAT(std::string(CostModel::Hierarchical(8, 2, 10, 8, 1, 0).Validate().message()),
             Catch::Contains("intra-host bandwidth must be > 0"));
}

TEST_CASE("Two-stage allreduces: a ring with ranks per host, a linear channel's fitted line") {
  // 4 hosts of 2 ranks; NIC 10 us and 1 GB/s, within the host 1 us and 10 GB/s: the flat ring
  // over the 8 ranks, which may also run an allreduce two-stage (the hierarchical closed form).
  CostModel model = CostModel::Hierarchical(8, 2, 10, 8, 1, 80);
  model.channels[0].algorithm = Algorithm::kRing;
  REQUIRE(model.Validate().ok());
  const ChannelCost& c = model.channels[0];
  const ChannelCost hier = CostModel::Hierarchical(8, 2, 10, 8, 1, 80).channels[0];
  const ChannelCost flat = CostModel::Algorithmic(Algorithm::kRing, 8, 10, 8).channels[0];
  REQUIRE(c.OffersTwoStage());
  CHECK_FALSE(flat.OffersTwoStage());
  CHECK_FALSE(hier.OffersTwoStage());  // a hierarchical channel runs every allreduce so already
  for (const double m : {1e3, 1e5, 1e6, 40.0 * 1024 * 1024}) {
    INFO(m << " bytes");
    const double one = flat.Seconds(Collective::kAllreduce, m);
    const double two = hier.Seconds(Collective::kAllreduce, m);
    CHECK(c.FormSeconds(Collective::kAllreduce, m, false) == Approx(one));
    CHECK(c.FormSeconds(Collective::kAllreduce, m, true) == Approx(two));
    CHECK(c.TwoStagePays(m) == (two < one));
    CHECK(c.Seconds(Collective::kAllreduce, m) == Approx(std::min(one, two)));
    // Reduce-scatters and allgathers have one form.
    CHECK(c.FormSeconds(Collective::kReduceScatter, m, true) ==
          Approx(flat.Seconds(Collective::kReduceScatter, m)));
  }
  // Two-stage pays at every size here: 2(H-1) = 6 NIC latencies instead of the ring's 14, and
  // 1.5 instead of 1.75 buffers through each NIC. With slow steps within the host, small
  // allreduces stay flat.
  CHECK(c.TwoStagePays(1e3));
  CHECK(c.TwoStagePays(40.0 * 1024 * 1024));
  CostModel slow_local = model;
  slow_local.channels[0].intra_latency_s = 100e-6;
  CHECK_FALSE(slow_local.channels[0].TwoStagePays(1e3));
  CHECK(slow_local.channels[0].TwoStagePays(40.0 * 1024 * 1024));
  // One host, or one rank per host: nothing to split.
  CostModel one_host = CostModel::Hierarchical(2, 2, 10, 8, 1, 80);
  one_host.channels[0].algorithm = Algorithm::kRing;
  CHECK_FALSE(one_host.channels[0].OffersTwoStage());
  // Host link rates on such a ring are refused (hierarchical channels take them).
  model.channels[0].set_host_bandwidth_bytes_per_s({1e9, 1e9, 5e8, 1e9});
  CHECK_THAT(std::string(model.Validate().message()), Catch::Contains("one rank per host"));

  // A linear channel: the runtime's two fitted lines, the cheaper one where each is.
  CostModel lin = CostModel::Linear(100, 1000);
  CHECK_FALSE(lin.channels[0].OffersTwoStage());
  lin.channels[0].two_stage = LinearTerm{300e-6, 800e-12};
  REQUIRE(lin.Validate().ok());
  CHECK(lin.channels[0].OffersTwoStage());
  // Break-even at 200 us / 200 us per MB = 1 MB.
  CHECK_FALSE(lin.channels[0].TwoStagePays(0.5e6));
  CHECK(lin.channels[0].TwoStagePays(2e6));
  CHECK(lin.Ms(0, Collective::kAllreduce, 2e6) == Approx(0.3 + 1.6));
  CHECK(lin.FormMs(0, Collective::kAllreduce, 2e6, false) == Approx(0.1 + 2.0));
  CHECK(lin.Ms(0, Collective::kAllreduce, 0.5e6) == Approx(0.1 + 0.5));
  lin.channels[0].two_stage.beta_s_per_byte = -1;
  CHECK_THAT(std::string(lin.Validate().message()), Catch::Contains("two_stage beta"));
}

TEST_CASE("Linear model: alpha + beta bytes, halves for reduce-scatter and allgather") {
  CostModel lin = CostModel::Linear(100, 1000);  // 100 us + 1000 us per MB
  CHECK(lin.Ms(0, Collective::kAllreduce, 2e6) == Approx(0.1 + 2.0));
  CHECK(lin.Ms(0, Collective::kReduceScatter, 2e6) == Approx((0.1 + 2.0) / 2));
  CHECK(lin.Validate().ok());
}

TEST_CASE("Validate names the bad channel field") {
  CostModel bad = CostModel::Linear(-1, 1);
  CHECK_FALSE(bad.Validate().ok());
  CHECK_THAT(std::string(bad.Validate().message()), Catch::Contains("alpha"));
  CostModel no_bw = CostModel::Algorithmic(Algorithm::kRing, 4, 1, 0);
  CHECK_THAT(std::string(no_bw.Validate().message()), Catch::Contains("bandwidth"));
  CHECK_FALSE(CostModel{}.Validate().ok());
  CHECK_FALSE(CostModel::Algorithmic(Algorithm::kRing, 0, 1, 1).Validate().ok());
  CHECK_FALSE(ParseAlgorithm("butterfly").ok());
  CHECK(*ParseAlgorithm("recursive-doubling") == Algorithm::kRecursiveDoubling);
}

TEST_CASE("FitLinear recovers alpha and beta by least squares") {
  std::vector<CostSample> samples;
  for (double b : {1e3, 1e5, 1e6, 1e7}) {
    samples.push_back({b, 20e-6 + b * 1e-9});
  }
  auto c = FitLinear(samples);
  REQUIRE(c.ok());
  CHECK(c->alpha_s == Approx(20e-6).epsilon(1e-6));
  CHECK(c->beta_s_per_byte == Approx(1e-9).epsilon(1e-6));
  // Noisy symmetric samples around the line still fit it.
  std::vector<CostSample> noisy = {{1e6, 1.1e-3}, {1e6, 0.9e-3}, {2e6, 2.1e-3}, {2e6, 1.9e-3}};
  auto n = FitLinear(noisy);
  REQUIRE(n.ok());
  CHECK(n->alpha_s == Approx(0).margin(1e-12));
  CHECK(n->beta_s_per_byte == Approx(1e-9));
  // Negative intercept is clamped, the slope refitted through the origin.
  auto clamp = FitLinear({{{1e6, 0.5e-3}, {2e6, 2e-3}}});
  REQUIRE(clamp.ok());
  CHECK(clamp->alpha_s == 0);
  CHECK(clamp->beta_s_per_byte > 0);
  CHECK_FALSE(FitLinear({{{1e6, 1e-3}}}).ok());
  CHECK_FALSE(FitLinear({{{1e6, 1e-3}, {1e6, 2e-3}}}).ok());
  CHECK_FALSE(FitLinear({{{1e6, NAN}, {2e6, 2e-3}}}).ok());
}

TEST_CASE("FitLinkCost floors the intercept at one small collective's time") {
  // Training collectives bent by queueing: the least-squares intercept is 0.
  const std::vector<CostSample> bent = {{1e5, 0.5e-3}, {1e6, 9e-3}, {4e6, 40e-3}, {8e6, 80e-3}};
  auto raw = FitLinear(bent);
  REQUIRE(raw.ok());
  CHECK(raw->alpha_s == 0);
  auto floored = FitLinkCost(bent, 1.2e-3);
  REQUIRE(floored.ok());
  CHECK(floored->alpha_s == Approx(1.2e-3));
  // Beta is refitted through the floored intercept: least squares of (t - alpha) / bytes.
  double num = 0, den = 0;
  for (const CostSample& s : bent) {
    num += s.bytes * (s.seconds - 1.2e-3);
    den += s.bytes * s.bytes;
  }
  CHECK(floored->beta_s_per_byte == Approx(num / den));
  // Without a floor, the fit stands.
  auto unfloored = FitLinkCost(bent, 0);
  REQUIRE(unfloored.ok());
  CHECK(unfloored->alpha_s == raw->alpha_s);
  CHECK(unfloored->beta_s_per_byte == raw->beta_s_per_byte);
  // An intercept above the fastest sample is capped there (slope bent at large sizes).
  const std::vector<CostSample> steep = {{4096, 1e-3}, {1e6, 20e-3}, {2e6, 21e-3}, {3e6, 22e-3}};
  REQUIRE(FitLinear(steep)->alpha_s > 5e-3);
  auto capped = FitLinkCost(steep, 0);
  REQUIRE(capped.ok());
  CHECK(capped->alpha_s == Approx(1e-3));
  CHECK(capped->beta_s_per_byte > 0);
  // The floor wins over the cap.
  auto both = FitLinkCost(steep, 2e-3);
  REQUIRE(both.ok());
  CHECK(both->alpha_s == Approx(2e-3));
  // Time that falls with size (noise): bytes still cost something.
  auto noise = FitLinkCost({{{1e5, 3e-3}, {1e6, 2e-3}}}, 1e-3);
  REQUIRE(noise.ok());
  CHECK(noise->alpha_s == Approx(2e-3));
  CHECK(noise->beta_s_per_byte > 0);
  CHECK_FALSE(FitLinkCost({{{1e6, 1e-3}}}, 1e-3).ok());
}

TEST_CASE("FitLinkCost floors the slope at a sustained rate") {
  // Training collectives timed on the rank that started last: 10 ms/MB, where the link sustains
  // 12.5 ms/MB back to back.
  const std::vector<CostSample> early = {{1e6, 10.1e-3}, {4e6, 40.1e-3}, {16e6, 160.1e-3}};
  auto fitted = FitLinkCost(early, 0.1e-3, 12.5e-9);
  REQUIRE(fitted.ok());
  CHECK(fitted->beta_s_per_byte == Approx(12.5e-9));
  CHECK(fitted->alpha_s == Approx(0.1e-3).margin(1e-6));  // the intercept is left alone
  // A floor below the fit changes nothing; 0 disables it.
  CHECK(FitLinkCost(early, 0.1e-3, 5e-9)->beta_s_per_byte == Approx(10e-9).epsilon(1e-3));
  CHECK(FitLinkCost(early, 0.1e-3, 0)->beta_s_per_byte == Approx(10e-9).epsilon(1e-3));
}

TEST_CASE("A linear channel's reduce-scatter and allgather use their own lines when fitted") {
  CostModel cost = CostModel::Linear(100, 10000);  // 100 us + 10 ms/MB
  const ChannelCost& c = cost.channels[0];
  const double mb = 1e6;
  // Unset: half an allreduce.
  CHECK(c.Seconds(Collective::kReduceScatter, mb) == Approx((100e-6 + 10e-3) / 2));
  CHECK(c.Seconds(Collective::kAllgather, mb) == Approx((100e-6 + 10e-3) / 2));
  cost.channels[0].reduce_scatter = LinearTerm{400e-6, 9e-9};
  cost.channels[0].allgather = LinearTerm{200e-6, 5e-9};
  CHECK(cost.channels[0].Seconds(Collective::kReduceScatter, mb) == Approx(400e-6 + 9e-3));
  CHECK(cost.channels[0].Seconds(Collective::kAllgather, mb) == Approx(200e-6 + 5e-3));
  CHECK(cost.channels[0].Seconds(Collective::kAllreduce, mb) == Approx(100e-6 + 10e-3));
  CHECK(cost.Validate().ok());
  cost.channels[0].allgather.beta_s_per_byte = -1;
  const absl::Status bad = cost.Validate();
  CHECK_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.message()), Catch::Contains("allgather beta"));
}

TEST_CASE("FitStillHolds keeps a fit whose prediction the new samples' median stays near") {
  ChannelCost fit;
  fit.alpha_s = 1e-3;
  fit.algorithm = Algorithm::kLinear;  // as FitLinkCost returns it
  fit.beta_s_per_byte = 1e-8;  // 10 ms/MB
  // Predicted: 2 ms, 11 ms, 21 ms.
  const std::vector<CostSample> alike = {{1e5, 1.9e-3}, {1e6, 10e-3}, {2e6, 23e-3}};
  const std::optional<double> held = FitStillHolds(alike, fit, 1.25);
  REQUIRE(held.has_value());
  CHECK(*held == Approx(0.95));  // the median of 0.95, 0.909 and 1.095
  // The link lost half its rate: every collective takes about twice as long.
  const std::vector<CostSample> slower = {{1e5, 3.5e-3}, {1e6, 21e-3}, {2e6, 41e-3}};
  CHECK_FALSE(FitStillHolds(slower, fit, 1.25).has_value());
  // Faster by more than the tolerance: not kept either.
  const std::vector<CostSample> faster = {{1e5, 1e-3}, {1e6, 5e-3}, {2e6, 10e-3}};
  CHECK_FALSE(FitStillHolds(faster, fit, 1.25).has_value());
  // One outlier does not move the median.
  const std::vector<CostSample> outlier = {{1e5, 2e-3}, {1e6, 90e-3}, {2e6, 21e-3}};
  CHECK(FitStillHolds(outlier, fit, 1.25).has_value());
  // Too few samples say nothing; nor does a tolerance below 1 or a sample that is not a time.
  CHECK_FALSE(FitStillHolds({{{1e6, 11e-3}, {2e6, 21e-3}}}, fit, 1.25).has_value());
  CHECK_FALSE(FitStillHolds(alike, fit, 0.9).has_value());
  const std::vector<CostSample> nan = {{1e5, NAN}, {1e6, 11e-3}, {2e6, 21e-3}};
  CHECK_FALSE(FitStillHolds(nan, fit, 1.25).has_value());
}

}  // namespace
}  // namespace overlap::sched
