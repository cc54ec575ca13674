// Per-compressor behaviour, and the multi-rank contract simulated in one process: combining the
// payloads as the executor would (sum for kAllreduce, gather for kAllgather) and decompressing
// equals the reference decompress-then-sum of every rank's payload.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "numeric/half.h"
#include "compression/compressor.h"
#include "tests/compression/test_util.h"

namespace overlap {
namespace compress {
namespace {

using testing::GaussianGradient;
using testing::Payload;

// Sums payloads element-wise as the executor would for `dtype` (fp16/bf16 with RNE per add).
void SumInto(DataType dtype, absl::Span<const uint8_t> in, absl::Span<uint8_t> acc, size_t bytes) {
  if (dtype == DataType::kFloat32) {
    auto* a = reinterpret_cast<float*>(acc.data());
    auto* b = reinterpret_cast<const float*>(in.data());
    for (size_t i = 0; i < bytes / 4; ++i) a[i] += b[i];
    return;
  }
  auto* a = reinterpret_cast<uint16_t*>(acc.data());
  auto* b = reinterpret_cast<const uint16_t*>(in.data());
  for (size_t i = 0; i < bytes / 2; ++i) {
    a[i] = dtype == DataType::kFloat16
               ? FloatToHalf(HalfToFloat(a[i]) + HalfToFloat(b[i]))
               : FloatToBFloat16(BFloat16ToFloat(a[i]) + BFloat16ToFloat(b[i]));
  }
}

// One step on `ranks` simulated ranks through the combine the compressor asks for.
// Returns {combined result, reference decompress-then-sum}.
std::pair<std::vector<float>, std::vector<float>> SimulatedStep(
    const Compressor& c, std::vector<ResidualState>& states,
    const std::vector<std::vector<float>>& grads, int64_t step) {
  const size_t n = grads[0].size(), ranks = grads.size();
  const size_t cap = c.MaxPayloadBytes(n).value();
  std::vector<Payload> payloads(ranks, Payload(cap));
  size_t bytes = 0;
  for (size_t r = 0; r < ranks; ++r) {
    const size_t b = c.Compress(grads[r], states[r], step, payloads[r].span()).value();
    if (c.combine() == Combine::kAllreduce && r > 0) REQUIRE(b == bytes);  // same on every rank
    bytes = b;
  }
  std::vector<float> reference(n, 0.0f), combined(n, 0.0f);
  if (c.combine() == Combine::kAllgather) {
    for (size_t r = 0; r < ranks; ++r) {
      REQUIRE(c.DecompressAdd(payloads[r].span(), states[0], step, absl::MakeSpan(combined)).ok());
    }
    return {combined, combined};
  }
  auto allreduce = [&](std::vector<Payload>& p, size_t nbytes) {
    Payload sum(cap);
    std::copy_n(p[0].span().data(), nbytes, sum.span().data());
    for (size_t r = 1; r < ranks; ++r) SumInto(c.payload_dtype(), p[r].span(), sum.span(), nbytes);
    return sum;
  };
  Payload summed = allreduce(payloads, bytes);
  if (c.rounds() == 2) {
    std::vector<Payload> second(ranks, Payload(cap));
    for (size_t r = 0; r < ranks; ++r) {
      bytes = c.NextRound(1, summed.span(), states[r], step, second[r].span()).value();
    }
    payloads = second;
    summed = allreduce(second, bytes);
  }
  for (size_t r = 0; r < ranks; ++r) {
    REQUIRE(c.DecompressAdd(payloads[r].span(), states[r], step, absl::MakeSpan(reference)).ok());
  }
  for (size_t r = 0; r < ranks; ++r) {
    REQUIRE(c.Decompress(summed.span(), states[r], step, absl::MakeSpan(combined)).ok());
  }
  return {combined, reference};
}

TEST_CASE("combined payloads decode to the decompress-then-sum reference on 2 and 4 ranks",
          "[multirank]") {
  for (const char* spec : {"none", "fp16", "bf16", "covap:R=3", "randomk:ratio=0.1",
                           "topk:ratio=0.05", "efsign", "powersgd:rank=3"}) {
    for (size_t ranks : {2u, 4u}) {
      INFO(spec << " ranks=" << ranks);
      auto c = MakeCompressor(spec).value();
      const size_t n = 1500;
      std::vector<ResidualState> states;
      for (size_t r = 0; r < ranks; ++r) states.emplace_back(8, n);
      for (int64_t step = 0; step < 4; ++step) {
        std::vector<std::vector<float>> grads;
        for (size_t r = 0; r < ranks; ++r) {
          grads.push_back(GaussianGradient(n, static_cast<uint32_t>(100 * step + r)));
        }
        auto [combined, reference] = SimulatedStep(*c, states, grads, step);
        // fp16/bf16 sums round at each add; everything else is a plain float sum.
        const double tol = c->payload_dtype() == DataType::kBFloat16  ? 0.05
                           : c->payload_dtype() == DataType::kFloat16 ? 0.005
                                                                      : 1e-4;
        for (size_t i = 0; i < n; ++i) REQUIRE(combined[i] == Approx(reference[i]).margin(tol));
      }
    }
  }
}

TEST_CASE("randomk indices depend only on (seed, tensor, step)", "[randomk]") {
  auto c = MakeCompressor("randomk:ratio=0.1,seed=7").value();
  auto other_seed = MakeCompressor("randomk:ratio=0.1,seed=8").value();
  const size_t n = 1000;
  const std::vector<float> ones(n, 1.0f);
  auto sent_mask = [&](const Compressor& comp, int64_t tensor, int64_t step) {
    ResidualState state(tensor, n);
    std::vector<float> out = testing::RunStep(comp, ones, state, step);
    std::vector<bool> mask(n);
    size_t count = 0;
    for (size_t i = 0; i < n; ++i) count += (mask[i] = out[i] != 0.0f);
    REQUIRE(count == 100);
    return mask;
  };
  REQUIRE(sent_mask(*c, 1, 5) == sent_mask(*c, 1, 5));
  REQUIRE(sent_mask(*c, 1, 5) != sent_mask(*c, 1, 6));
  REQUIRE(sent_mask(*c, 1, 5) != sent_mask(*c, 2, 5));
  REQUIRE(sent_mask(*c, 1, 5) != sent_mask(*other_seed, 1, 5));
}

TEST_CASE("topk exact sends exactly the k largest magnitudes", "[topk]") {
  auto c = MakeCompressor("topk:k=10").value();
  const size_t n = 5000;
  std::vector<float> grad = GaussianGradient(n, 4);
  std::vector<float> sorted(n);
  std::transform(grad.begin(), grad.end(), sorted.begin(), [](float x) { return std::fabs(x); });
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  ResidualState state(1, n);
  const std::vector<float> out = testing::RunStep(*c, grad, state, 0);
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    if (out[i] != 0.0f) {
      ++count;
      REQUIRE(out[i] == grad[i]);
      REQUIRE(std::fabs(grad[i]) >= sorted[9]);
      REQUIRE(state.residual()[i] == 0.0f);
    } else {
      REQUIRE(state.residual()[i] == grad[i]);
    }
  }
  REQUIRE(count == 10);
}

TEST_CASE("topk sampled sends at most k, close to k, all above the k-th magnitude's bin",
          "[topk]") {
  auto c = MakeCompressor("topk:ratio=0.01,method=sampled").value();
  const size_t n = 1 << 20;
  const std::vector<float> grad = GaussianGradient(n, 5);
  ResidualState state(1, n);
  const std::vector<float> out = testing::RunStep(*c, grad, state, 3);
  size_t count = 0;
  float smallest_sent = INFINITY, largest_kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (out[i] != 0.0f) {
      ++count;
      smallest_sent = std::min(smallest_sent, std::fabs(out[i]));
    } else {
      largest_kept = std::max(largest_kept, std::fabs(state.residual()[i]));
    }
  }
  const size_t k = static_cast<size_t>(std::round(n * 0.01));
  REQUIRE(count <= k);
  REQUIRE(count >= k * 95 / 100);
  // Whatever was sent is at least as large as whatever was kept: it is a true top set.
  REQUIRE(smallest_sent >= largest_kept * 0.999f);
}

TEST_CASE("fp16 payload is plain fp16 the executor can sum", "[cast]") {
  auto c = MakeCompressor("fp16").value();
  const std::vector<float> grad = {1.0f, 0.5f, -2.0f, 1.0f + 1.0f / 4096};
  ResidualState state(1, grad.size());
  Payload p(c->MaxPayloadBytes(grad.size()).value());
  REQUIRE(c->Compress(grad, state, 0, p.span()).value() == 8);
  const auto* h = reinterpret_cast<const uint16_t*>(p.span().data());
  REQUIRE(h[0] == 0x3c00);
  REQUIRE(h[1] == 0x3800);
  REQUIRE(h[2] == 0xc000);
  REQUIRE(h[3] == 0x3c00);                      // 1 + 2^-12 rounds to 1 ...
  REQUIRE(state.residual()[3] == 1.0f / 4096);  // ... and the residual keeps 2^-12
}

TEST_CASE("fp16/bf16 with ef=0 send the plain cast and keep no residual", "[cast]") {
  for (const char* spec : {"fp16:ef=0", "bf16:ef=0"}) {
    INFO(spec);
    auto c = MakeCompressor(spec).value();
    const bool half = c->payload_dtype() == DataType::kFloat16;
    const std::vector<float> grad = GaussianGradient(999, 17);
    ResidualState state(1, grad.size());
    Payload p(c->MaxPayloadBytes(grad.size()).value());
    REQUIRE(c->Compress(grad, state, 0, p.span()).ok());
    const auto* h = reinterpret_cast<const uint16_t*>(p.span().data());
    for (size_t i = 0; i < grad.size(); ++i) {
      REQUIRE(h[i] == (half ? FloatToHalf(grad[i]) : FloatToBFloat16(grad[i])));
      REQUIRE(state.residual()[i] == 0.0f);
    }
  }
}

TEST_CASE("every compressor handles empty and one-element tensors", "[edge]") {
  for (const char* spec : {"none", "fp16", "bf16", "covap:R=4", "randomk", "topk",
                           "topk:method=sampled", "efsign", "powersgd"}) {
    INFO(spec);
    auto c = MakeCompressor(spec).value();
    for (size_t n : {0u, 1u}) {
      ResidualState state(1, n);
      const std::vector<float> grad(n, 3.0f);
      std::vector<float> sent(n, 0.0f);
      for (int64_t step = 0; step < 4; ++step) {
        const std::vector<float> out = testing::RunStep(*c, grad, state, step);
        for (size_t i = 0; i < n; ++i) sent[i] += out[i];
      }
      // Four steps of 3.0: whatever was not sent is in the residual.
      for (size_t i = 0; i < n; ++i) REQUIRE(sent[i] + state.residual()[i] == Approx(12.0f));
    }
  }
}

TEST_CASE("size mismatches and short buffers name the compressor and tensor", "[errors]") {
  auto c = MakeCompressor("fp16").value();
  ResidualState state(42, 10);
  std::vector<float> grad(11, 1.0f);
  Payload p(64);
  const absl::Status s = c->Compress(grad, state, 0, p.span()).status();
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(s.message().find("tensor 42") != absl::string_view::npos);
  std::vector<float> ok_grad(10, 1.0f);
  const absl::Status short_buf = c->Compress(ok_grad, state, 0, p.span().subspan(0, 4)).status();
  REQUIRE(short_buf.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(short_buf.message().find("20 needed") != absl::string_view::npos);
  auto topk = MakeCompressor("topk:k=2").value();
  Payload bad(64);
  reinterpret_cast<uint32_t*>(bad.span().data())[0] = 2;
  reinterpret_cast<uint32_t*>(bad.span().data())[1] = 99;  // index outside a 10-element tensor
  std::vector<float> out(10);
  REQUIRE(topk->DecompressAdd(bad.span(), state, 0, absl::MakeSpan(out)).code() ==
          absl::StatusCode::kDataLoss);
  REQUIRE(c->NextRound(1, p.span(), state, 0, p.span()).status().code() ==
          absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace compress
}  // namespace overlap
