// "randomk": k elements chosen by a seed shared by all ranks, so every rank picks the same
// indices and the payloads (k float32 values, no indices) sum directly in an allreduce.
//
// Selection is stratified: the tensor is cut into k nearly equal strata and one index is drawn
// in each. Every element is then sent with probability ~k/n, indices are distinct and ascending
// (cache-friendly), and drawing costs O(k) with no state.
#include <algorithm>

#include "compression/compressor_base.h"
#include "compression/factories.h"
#include "compression/shared_random.h"

namespace overlap {
namespace compress {
namespace {

class RandomKCompressor final : public CompressorBase {
 public:
  RandomKCompressor(CompressorConfig config, int64_t k, double ratio, uint64_t seed)
      : CompressorBase(std::move(config)), k_(k), ratio_(ratio), seed_(seed) {}

  Combine combine() const override { return Combine::kAllreduce; }
  DataType payload_dtype() const override { return DataType::kFloat32; }

  absl::StatusOr<size_t> MaxPayloadBytes(size_t n) const override {
    absl::StatusOr<size_t> k = SelectCount(*this, -1, n, k_, ratio_);
    if (!k.ok()) return k.status();
    return *k * sizeof(float);
  }

  absl::StatusOr<size_t> Compress(absl::Span<const float> grad, ResidualState& state, int64_t step,
                                  absl::Span<uint8_t> payload) const override {
    absl::StatusOr<size_t> k = SelectCount(*this, state.tensor_id(), grad.size(), k_, ratio_);
    if (!k.ok()) return k.status();
    const size_t bytes = *k * sizeof(float);
    if (absl::Status s = CheckCompressArgs(grad.size(), state, payload, bytes); !s.ok()) return s;
    absl::Span<float> r = state.residual();
    numeric::Add(grad, r, isa());
    absl::Span<float> values = PayloadAs<float>(payload, 0, *k);
    ForEachIndex(state.tensor_id(), step, grad.size(), *k, [&](size_t i, size_t index) {
      values[i] = r[index];
      r[index] = 0.0f;
    });
    return bytes;
  }

  absl::Status Decompress(absl::Span<const uint8_t> payload, ResidualState& state, int64_t step,
                          absl::Span<float> out) const override {
    std::fill(out.begin(), out.end(), 0.0f);
    return DecompressAdd(payload, state, step, out);
  }

  absl::Status DecompressAdd(absl::Span<const uint8_t> payload, const ResidualState& state,
                             int64_t step, absl::Span<float> out) const override {
    absl::StatusOr<size_t> k = SelectCount(*this, state.tensor_id(), out.size(), k_, ratio_);
    if (!k.ok()) return k.status();
    if (absl::Status s = CheckDecompressArgs(out.size(), state, payload, *k * sizeof(float));
        !s.ok()) {
      return s;
    }
    absl::Span<const float> values = PayloadAs<float>(payload, 0, *k);
    ForEachIndex(state.tensor_id(), step, out.size(), *k,
                 [&](size_t i, size_t index) { out[index] += values[i]; });
    return absl::OkStatus();
  }

 private:
  // Calls f(i, index) for stratum i = 0..k-1. The first n % k strata hold n / k + 1 elements.
  template <typename F>
  void ForEachIndex(int64_t tensor_id, int64_t step, size_t n, size_t k, F f) const {
    if (k == 0) return;  // empty tensor
    const uint64_t key = StreamKey(seed_, tensor_id, step);
    const size_t base = n / k, extra = n % k;
    size_t start = 0;
    for (size_t i = 0; i < k; ++i) {
      const size_t len = base + (i < extra ? 1 : 0);
      f(i, start + Below(Mix64(key + i), static_cast<uint32_t>(len)));
      start += len;
    }
  }

  int64_t k_;  // 0: use ratio_
  double ratio_;
  uint64_t seed_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Compressor>> MakeRandomK(ParamReader& params,
                                                        const CompressorContext&) {
  int64_t k = 0;
  double ratio = 0.0;
  absl::Status size = params.KOrRatio(int64_t{1} << 32, &k, &ratio);
  if (!size.ok()) return size;
  absl::StatusOr<int64_t> seed = params.Int("seed", 0, 0, INT64_MAX);
  if (!seed.ok()) return seed.status();
  return std::make_unique<RandomKCompressor>(params.canonical(), k, ratio,
                                             static_cast<uint64_t>(*seed));
}

}  // namespace compress
}  // namespace overlap
