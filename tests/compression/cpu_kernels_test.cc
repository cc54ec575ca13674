// The AVX2 kernels against the scalar path and numeric/half.h, bit for bit.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "numeric/half.h"
#include "numeric/cpu_kernels.h"
#include "tests/compression/test_util.h"

namespace overlap {
namespace numeric {
namespace {

uint32_t Bits(float f) { return FloatBits(f); }

// Skips (visibly) when this CPU has no AVX2 path to compare.
bool HaveAvx2() {
  if (BestIsa() == Isa::kAvx2) return true;
  WARN("CPU lacks AVX2/FMA/F16C: only the scalar path is tested here");
  return false;
}

// Float inputs covering every exponent and both signs: a stride through all 2^32 bit patterns
// (prime, so it hits every low-bit residue) plus the rounding boundaries of fp16 and bf16.
std::vector<float> SweepInputs() {
  std::vector<float> in;
  for (uint64_t u = 0; u < (1ull << 32); u += 4099)
    in.push_back(BitsToFloat(static_cast<uint32_t>(u)));
  for (uint32_t base : {0x477fe000u, 0x477ff000u, 0x38800000u, 0x33000000u, 0x3f808000u,
                        0x7f7f8000u, 0x7f7fffffu, 0x7f800000u, 0x7f800001u, 0x7fc00000u}) {
    for (uint32_t d = 0; d < 64; ++d) {
      in.push_back(BitsToFloat(base + d));
      in.push_back(BitsToFloat(base - d));
      in.push_back(BitsToFloat((base + d) | 0x80000000u));
    }
  }
  return in;
}

TEST_CASE("float->fp16 and float->bf16 match half.h on both paths", "[kernels]") {
  const std::vector<float> in = SweepInputs();
  for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
    if (isa == Isa::kAvx2 && !HaveAvx2()) continue;
    std::vector<uint16_t> h(in.size()), b(in.size());
    FloatToHalf(in, absl::MakeSpan(h), isa);
    FloatToBFloat16(in, absl::MakeSpan(b), isa);
    size_t bad = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      if (h[i] != overlap::FloatToHalf(in[i]) || b[i] != overlap::FloatToBFloat16(in[i])) {
        if (bad++ < 5) UNSCOPED_INFO("input bits " << Bits(in[i]) << " isa " << IsaName(isa));
      }
    }
    REQUIRE(bad == 0);
  }
}

TEST_CASE("fp16->float and bf16->float match half.h for all 65536 inputs", "[kernels]") {
  std::vector<uint16_t> in(65536 + 5);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
    if (isa == Isa::kAvx2 && !HaveAvx2()) continue;
    std::vector<float> h(in.size()), b(in.size());
    HalfToFloat(in, absl::MakeSpan(h), isa);
    BFloat16ToFloat(in, absl::MakeSpan(b), isa);
    for (size_t i = 0; i < in.size(); ++i) {
      REQUIRE(Bits(h[i]) == Bits(overlap::HalfToFloat(in[i])));
      REQUIRE(Bits(b[i]) == Bits(overlap::BFloat16ToFloat(in[i])));
    }
    // The accumulating variants add exactly the converted value.
    std::vector<float> acc(in.size(), 1.0f);
    HalfToFloatAdd(in, absl::MakeSpan(acc), isa);
    REQUIRE(Bits(acc[0x3c00]) == Bits(2.0f));
  }
}

TEST_CASE("fp16 and bf16 sums match half.h on both paths", "[kernels]") {
  // Every 16-bit pattern as `in`, paired four ways with others as `inout`: zeros, subnormals,
  // infinities and NaNs meet each other and every finite value. Offset by one element, so the
  // vector loop starts unaligned and the scalar tail runs.
  std::vector<Isa> paths = {Isa::kScalar};
  if (HaveAvx2()) paths.push_back(Isa::kAvx2);
  const auto nan_half = [](uint16_t h) { return (h & 0x7fffu) > 0x7c00u; };
  const auto nan_bf16 = [](uint16_t h) { return (h & 0x7fffu) > 0x7f80u; };
  for (uint32_t multiplier : {1u, 40503u, 7919u, 65521u}) {
    std::vector<uint16_t> in(65537), other(65537);
    for (uint32_t i = 0; i < 65536; ++i) {
      in[i + 1] = static_cast<uint16_t>(i);
      other[i + 1] = static_cast<uint16_t>(i * multiplier + 12345u);
    }
    for (Isa isa : paths) {
      for (bool bf16 : {false, true}) {
        std::vector<uint16_t> inout = other;
        const absl::Span<const uint16_t> a = absl::MakeConstSpan(in).subspan(1);
        const absl::Span<uint16_t> b = absl::MakeSpan(inout).subspan(1);
        if (bf16) {
          BFloat16Sum(a, b, isa);
        } else {
          HalfSum(a, b, isa);
        }
        size_t wrong = 0;
        for (size_t i = 1; i < in.size(); ++i) {
          const uint16_t x = in[i], y = other[i];
          const bool both_nan = bf16 ? nan_bf16(x) && nan_bf16(y) : nan_half(x) && nan_half(y);
          const uint16_t want =
              bf16 ? overlap::FloatToBFloat16(overlap::BFloat16ToFloat(x) +
                                              overlap::BFloat16ToFloat(y))
                   : overlap::FloatToHalf(overlap::HalfToFloat(x) + overlap::HalfToFloat(y));
          const bool ok =
              both_nan ? (bf16 ? nan_bf16(inout[i]) : nan_half(inout[i])) : inout[i] == want;
          if (!ok && wrong++ == 0) {
            UNSCOPED_INFO((bf16 ? "bf16 " : "fp16 ") << IsaName(isa) << ": " << x << " + " << y
                                                     << " gave " << inout[i] << ", want " << want);
          }
        }
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("error-feedback casts: paths agree bit for bit and sent + residual is exact",
          "[kernels]") {
  std::vector<float> grad = SweepInputs();
  std::vector<float> residual0 = compress::testing::GaussianGradient(grad.size(), 3, 1e-3f);
  for (bool bf16 : {false, true}) {
    std::vector<std::vector<float>> residuals;
    std::vector<std::vector<uint16_t>> payloads;
    for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
      if (isa == Isa::kAvx2 && !HaveAvx2()) continue;
      std::vector<float> r = residual0;
      std::vector<uint16_t> p(grad.size());
      if (bf16) {
        ErrorFeedbackToBFloat16(grad, absl::MakeSpan(r), absl::MakeSpan(p), isa);
      } else {
        ErrorFeedbackToHalf(grad, absl::MakeSpan(r), absl::MakeSpan(p), isa);
      }
      residuals.push_back(r);
      payloads.push_back(p);
    }
    for (size_t path = 1; path < residuals.size(); ++path) {
      for (size_t i = 0; i < grad.size(); ++i) {
        REQUIRE(payloads[path][i] == payloads[0][i]);
        REQUIRE(Bits(residuals[path][i]) == Bits(residuals[0][i]));
      }
    }
    // Exactness: sent + new residual reproduces v = grad + old residual for every finite v.
    const std::vector<float>& r = residuals[0];
    for (size_t i = 0; i < grad.size(); ++i) {
      const float v = grad[i] + residual0[i];
      const float sent =
          bf16 ? overlap::BFloat16ToFloat(payloads[0][i]) : overlap::HalfToFloat(payloads[0][i]);
      const bool saturated = !bf16 && std::fabs(v) > 65504.0f;
      if (std::isfinite(v)) {
        REQUIRE(std::isfinite(sent));  // saturates instead of overflowing to inf
        if (saturated) {
          // v - 65504 is rounded once: the only inexact case, off by at most half an ulp of v.
          REQUIRE(std::fabs(static_cast<double>(sent) + r[i] - v) <= std::ldexp(std::fabs(v), -24));
        } else {
          REQUIRE(static_cast<double>(sent) + r[i] == static_cast<double>(v));
        }
      } else {
        REQUIRE(r[i] == 0.0f);  // a non-finite value is sent, not kept
        REQUIRE(std::isnan(sent) == std::isnan(v));
      }
    }
  }
}

TEST_CASE("fp16 error feedback saturates at 65504 and keeps the excess", "[kernels]") {
  std::vector<float> grad = {70000.0f, -1e9f, 65504.0f, std::numeric_limits<float>::infinity()};
  for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
    if (isa == Isa::kAvx2 && !HaveAvx2()) continue;
    std::vector<float> g(16, 0.0f), r(16, 0.0f);
    std::copy(grad.begin(), grad.end(), g.begin());
    std::vector<uint16_t> p(16);
    ErrorFeedbackToHalf(g, absl::MakeSpan(r), absl::MakeSpan(p), isa);
    REQUIRE(p[0] == 0x7bffu);
    REQUIRE(r[0] == 70000.0f - 65504.0f);
    REQUIRE(p[1] == 0xfbffu);
    REQUIRE(r[1] == -1e9f + 65504.0f);
    REQUIRE(p[2] == 0x7bffu);
    REQUIRE(r[2] == 0.0f);
    REQUIRE(p[3] == 0x7c00u);
    REQUIRE(r[3] == 0.0f);
  }
}

TEST_CASE("sign pack, unpack and abs-sum agree across paths", "[kernels]") {
  for (size_t n : {1u, 7u, 8u, 9u, 100u, 4099u, 20000u}) {
    const std::vector<float> grad = compress::testing::GaussianGradient(n, static_cast<uint32_t>(n));
    std::vector<std::vector<float>> residuals;
    std::vector<std::vector<uint8_t>> bits;
    std::vector<double> sums;
    std::vector<std::vector<float>> decoded;
    for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
      if (isa == Isa::kAvx2 && !HaveAvx2()) continue;
      std::vector<float> r(n, 0.25f);
      sums.push_back(AddAndSumAbs(grad, absl::MakeSpan(r), isa));
      std::vector<uint8_t> b((n + 7) / 8, 0xff);
      SignPack(absl::MakeSpan(r), 0.5f, absl::MakeSpan(b), isa);
      std::vector<float> out(n, 1.0f);
      SignUnpackAdd(b, 0.5f, absl::MakeSpan(out), isa);
      residuals.push_back(r);
      bits.push_back(b);
      decoded.push_back(out);
    }
    // Reference: scalar semantics written out here.
    double want_sum = 0;
    for (size_t i = 0; i < n; ++i) want_sum += std::fabs(grad[i] + 0.25f);
    for (size_t p = 0; p < sums.size(); ++p) {
      REQUIRE(sums[p] == Approx(want_sum).epsilon(1e-6));
      REQUIRE(bits[p] == bits[0]);
      for (size_t i = 0; i < n; ++i) {
        const float v = grad[i] + 0.25f;
        const bool negative = std::signbit(v);
        REQUIRE(((bits[p][i / 8] >> (i % 8)) & 1) == (negative ? 1 : 0));
        REQUIRE(Bits(residuals[p][i]) == Bits(v - (negative ? -0.5f : 0.5f)));
        REQUIRE(decoded[p][i] == (negative ? 0.5f : 1.5f));
      }
      if (n % 8 != 0) REQUIRE((bits[p].back() >> (n % 8)) == 0);  // padding bits are zero
    }
  }
}

TEST_CASE("collect-at-least and send-with-residual agree across paths", "[kernels]") {
  const std::vector<float> x = compress::testing::GaussianGradient(10007, 11);
  for (uint32_t min_key : {0u, MagnitudeKey(1.0f), MagnitudeKey(2.5f), 0x7f800000u}) {
    std::vector<uint64_t> scalar, avx;
    CollectAtLeast(x, min_key, scalar, Isa::kScalar);
    for (uint64_t c : scalar) {
      REQUIRE(MagnitudeKey(x[static_cast<uint32_t>(c)]) >= min_key);
      REQUIRE((c >> 32) == MagnitudeKey(x[static_cast<uint32_t>(c)]));
    }
    size_t expected = 0;
    for (float v : x) expected += MagnitudeKey(v) >= min_key;
    REQUIRE(scalar.size() == expected);
    if (!HaveAvx2()) continue;
    CollectAtLeast(x, min_key, avx, Isa::kAvx2);
    REQUIRE(avx == scalar);
    // The fused add-and-collect sees the sums.
    std::vector<float> acc1(x.size(), 0.5f), acc2 = acc1;
    std::vector<uint64_t> fused_scalar, fused_avx;
    AddAndCollectAtLeast(x, absl::MakeSpan(acc1), min_key, fused_scalar, Isa::kScalar);
    AddAndCollectAtLeast(x, absl::MakeSpan(acc2), min_key, fused_avx, Isa::kAvx2);
    REQUIRE(fused_avx == fused_scalar);
    REQUIRE(acc1 == acc2);
    size_t want = 0;
    for (float v : x) want += MagnitudeKey(v + 0.5f) >= min_key;
    REQUIRE(fused_scalar.size() == want);
  }
  const std::vector<float> g = compress::testing::GaussianGradient(1001, 12);
  std::vector<float> r1 = compress::testing::GaussianGradient(1001, 13), r2 = r1, o1(1001), o2(1001);
  SendWithResidual(g, absl::MakeSpan(r1), 0.75f, absl::MakeSpan(o1), Isa::kScalar);
  if (HaveAvx2()) {
    SendWithResidual(g, absl::MakeSpan(r2), 0.75f, absl::MakeSpan(o2), Isa::kAvx2);
    for (size_t i = 0; i < g.size(); ++i) {
      REQUIRE(Bits(o1[i]) == Bits(o2[i]));
      REQUIRE(Bits(r1[i]) == Bits(r2[i]));
    }
  }
}

TEST_CASE("large tensors take the streaming-store paths and still match the scalar path",
          "[kernels]") {
  if (!HaveAvx2()) return;
  // Above the 2^21-element streaming threshold, with outputs offset from any alignment.
  const size_t n = (size_t{1} << 21) + 13;
  const std::vector<float> g = compress::testing::GaussianGradient(n, 14, 50.0f);
  const std::vector<float> r0 = compress::testing::GaussianGradient(n, 15, 0.01f);
  std::vector<float> r_scalar = r0, r_avx = r0;
  std::vector<uint16_t> h_scalar(n + 3), h_avx(n + 3);
  ErrorFeedbackToHalf(g, absl::MakeSpan(r_scalar), absl::MakeSpan(h_scalar).subspan(3, n),
                      Isa::kScalar);
  ErrorFeedbackToHalf(g, absl::MakeSpan(r_avx), absl::MakeSpan(h_avx).subspan(3, n), Isa::kAvx2);
  REQUIRE(h_scalar == h_avx);
  REQUIRE(std::memcmp(r_scalar.data(), r_avx.data(), n * sizeof(float)) == 0);
  r_scalar = r0;
  r_avx = r0;
  ErrorFeedbackToBFloat16(g, absl::MakeSpan(r_scalar), absl::MakeSpan(h_scalar).subspan(1, n),
                          Isa::kScalar);
  ErrorFeedbackToBFloat16(g, absl::MakeSpan(r_avx), absl::MakeSpan(h_avx).subspan(1, n),
                          Isa::kAvx2);
  REQUIRE(h_scalar == h_avx);
  REQUIRE(std::memcmp(r_scalar.data(), r_avx.data(), n * sizeof(float)) == 0);

  std::vector<float> s_scalar = r0, s_avx = r0, o_scalar(n + 1), o_avx(n + 1);
  SendWithResidual(g, absl::MakeSpan(s_scalar), 0.625f, absl::MakeSpan(o_scalar).subspan(1, n),
                   Isa::kScalar);
  SendWithResidual(g, absl::MakeSpan(s_avx), 0.625f, absl::MakeSpan(o_avx).subspan(1, n),
                   Isa::kAvx2);
  REQUIRE(std::memcmp(o_scalar.data(), o_avx.data(), (n + 1) * sizeof(float)) == 0);
  REQUIRE(std::memcmp(s_scalar.data(), s_avx.data(), n * sizeof(float)) == 0);
}

TEST_CASE("magnitude histogram counts every element in its 1/8-octave bin", "[kernels]") {
  std::vector<float> x = {1.0f, -1.0f, 1.2f, 2.0f, 0.0f, -0.0f};
  std::vector<uint32_t> hist(2048, 0);
  MagnitudeHistogram(x, absl::MakeSpan(hist));
  REQUIRE(hist[MagnitudeKey(1.0f) >> 20] == 2);
  REQUIRE(hist[MagnitudeKey(1.2f) >> 20] == 1);
  REQUIRE((MagnitudeKey(1.2f) >> 20) == (MagnitudeKey(1.0f) >> 20) + 1);
  REQUIRE(hist[MagnitudeKey(2.0f) >> 20] == 1);
  REQUIRE(hist[0] == 2);
}

}  // namespace
}  // namespace numeric
}  // namespace overlap
