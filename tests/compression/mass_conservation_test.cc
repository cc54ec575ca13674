// Error feedback loses nothing: after every step, everything sent so far plus the residual equals
// every gradient seen so far. Exactly for the filters and casts (on a dyadic grid, where the
// float running sums themselves are exact); within the documented bound for efsign and powersgd.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "compression/compressor.h"
#include "tests/compression/test_util.h"

namespace overlap {
namespace compress {
namespace {

using testing::DyadicGradient;
using testing::RunStep;

double Norm(absl::Span<const float> x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

TEST_CASE("sent + residual == sum of gradients, exactly", "[mass]") {
  CompressorContext ctx;
  ctx.comm_compute_ratio = 3.2;  // covap R=auto -> 4
  for (const char* spec :
       {"none", "fp16", "bf16", "covap:R=4", "covap:R=3,ramp_steps=8", "covap:R=auto,shard=100",
        "covap:R=1", "randomk:ratio=0.05", "randomk:k=1", "topk:ratio=0.02",
        "topk:ratio=0.02,method=sampled", "topk:k=1000"}) {
    for (size_t n : {1000u, 4099u}) {
      INFO(spec << " n=" << n);
      auto c = MakeCompressor(spec, ctx).value();
      ResidualState state(5, n);
      std::vector<double> seen(n, 0.0), sent(n, 0.0);
      for (int64_t step = 0; step < 16; ++step) {
        const std::vector<float> grad = DyadicGradient(n, static_cast<uint32_t>(step * 31 + n));
        const std::vector<float> out = RunStep(*c, grad, state, step);
        for (size_t i = 0; i < n; ++i) {
          seen[i] += grad[i];
          sent[i] += out[i];
        }
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) bad += sent[i] + state.residual()[i] != seen[i];
        REQUIRE(bad == 0);
      }
    }
  }
}

TEST_CASE("covap sends every shard exactly once every R steps", "[mass][covap]") {
  auto c = MakeCompressor("covap:R=4,shard=10").value();
  const size_t n = 95;  // 10 shards, the last one short
  ResidualState state(1, n);
  std::vector<int> times_sent(n, 0);
  for (int64_t step = 0; step < 8; ++step) {
    const std::vector<float> grad(n, 1.0f);
    const std::vector<float> out = RunStep(*c, grad, state, step);
    for (size_t i = 0; i < n; ++i) {
      const size_t shard = i / 10;
      const bool due = (shard + step) % 4 == 0;
      REQUIRE((out[i] != 0.0f) == due);
      if (due) {
        // A shard that waited R steps carries R gradients (or step + 1 at the start).
        REQUIRE(out[i] == static_cast<float>(std::min<int64_t>(step + 1, 4)));
        ++times_sent[i];
      }
    }
  }
  for (int t : times_sent) REQUIRE(t == 2);
}

TEST_CASE("covap's ramped coefficient sends alpha of the residual and keeps the rest",
          "[mass][covap]") {
  auto c = MakeCompressor("covap:R=2,alpha0=0.5,ramp_steps=4").value();
  ResidualState state(1, 4);  // shards of 2: shard 0 at even steps, shard 1 at odd steps
  const std::vector<float> grad(4, 1.0f);
  std::vector<float> out = RunStep(*c, grad, state, 0);  // alpha 0.5, residual 0
  REQUIRE(out == std::vector<float>{1, 1, 0, 0});
  out = RunStep(*c, grad, state, 1);  // shard 1: residual 1, alpha 0.625 -> 1 + 0.625
  REQUIRE(out == std::vector<float>{0, 0, 1.625f, 1.625f});
  REQUIRE(state.residual()[2] == 0.375f);
  REQUIRE(state.residual()[0] == 1.0f);
  out = RunStep(*c, grad, state, 4);  // alpha 1: everything goes
  REQUIRE(out == std::vector<float>{2, 2, 0, 0});
  REQUIRE(state.residual()[0] == 0.0f);
}

TEST_CASE("efsign keeps ||residual||^2 = ||v||^2 - ||v||_1^2 / n <= (1 - 1/n) ||v||^2",
          "[mass][efsign]") {
  auto c = MakeCompressor("efsign").value();
  const size_t n = 1003;
  ResidualState state(2, n);
  std::vector<double> seen(n, 0.0), sent(n, 0.0);
  for (int64_t step = 0; step < 10; ++step) {
    const std::vector<float> grad = testing::GaussianGradient(n, static_cast<uint32_t>(step));
    std::vector<float> v(n);
    double l1 = 0, l2 = 0;
    for (size_t i = 0; i < n; ++i) {
      v[i] = grad[i] + state.residual()[i];
      l1 += std::fabs(v[i]);
      l2 += static_cast<double>(v[i]) * v[i];
    }
    const std::vector<float> out = RunStep(*c, grad, state, step);
    const double r2 = std::pow(Norm(state.residual()), 2);
    REQUIRE(r2 == Approx(l2 - l1 * l1 / n).epsilon(1e-4));
    REQUIRE(r2 <= (1.0 - 1.0 / n) * l2 * (1 + 1e-5));
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(std::fabs(out[i]) == Approx(l1 / n).epsilon(1e-5));
      seen[i] += grad[i];
      sent[i] += out[i];
    }
    // Mass: float rounding only, relative to the magnitudes involved.
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(sent[i] + state.residual()[i] == Approx(seen[i]).margin(1e-4));
    }
  }
}

TEST_CASE("powersgd residual is the part outside the shared subspace: ||r'|| <= ||v||",
          "[mass][powersgd]") {
  for (const char* spec : {"powersgd:rank=1", "powersgd:rank=4"}) {
    INFO(spec);
    auto c = MakeCompressor(spec).value();
    const size_t n = 2000;  // 45 x 45 padded matrix
    ResidualState state(3, n);
    std::vector<double> seen(n, 0.0), sent(n, 0.0);
    for (int64_t step = 0; step < 8; ++step) {
      const std::vector<float> grad =
          testing::GaussianGradient(n, static_cast<uint32_t>(step + 50));
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = grad[i] + state.residual()[i];
      const std::vector<float> out = RunStep(*c, grad, state, step);
      REQUIRE(Norm(state.residual()) <= Norm(v) * (1 + 1e-5));
      for (size_t i = 0; i < n; ++i) {
        REQUIRE(out[i] + state.residual()[i] == Approx(v[i]).margin(1e-4));
        seen[i] += grad[i];
        sent[i] += out[i];
      }
      REQUIRE(state.aux().size() == 45u * std::stoul(c->config().params.at("rank")));
    }
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(sent[i] + state.residual()[i] == Approx(seen[i]).margin(1e-3));
    }
  }
}

TEST_CASE("powersgd reconstructs a rank-r gradient exactly once Q is warm", "[powersgd]") {
  auto c = MakeCompressor("powersgd:rank=2").value();
  const size_t rows = 30, cols = 30, n = rows * cols;
  std::vector<float> grad(n);
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j) {
      grad[i * cols + j] = std::sin(0.3f * i) * std::cos(0.2f * j) + 0.5f * (i % 3) * (j % 5);
    }
  }
  ResidualState state(4, n);
  const std::vector<float> out = RunStep(*c, grad, state, 0);
  for (size_t i = 0; i < n; ++i) REQUIRE(out[i] == Approx(grad[i]).margin(1e-4));
  REQUIRE(Norm(state.residual()) < 1e-3);
}

}  // namespace
}  // namespace compress
}  // namespace overlap
