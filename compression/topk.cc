// "topk": the k largest-magnitude elements of grad + residual, sent as (index, value) pairs
// through an allgather; the residual keeps everything else exactly (sent values are copies).
//
// method=exact: a 2048-bin histogram of magnitude keys finds the 1/8-octave bin holding the k-th
// largest element; one scan collects every element at or above that bin, and nth_element over
// those few candidates picks exactly k.
// method=sampled: the threshold is the quantile of a strided sample (about 16 n / k elements, at
// least 1024) that ~1.5 k elements should pass, so one scan collects a short candidate list and
// nth_element sends its top k: the true top k unless the sample was off by over a third, in
// which case fewer than k may pass and fewer are sent (the count is in the payload).
//
// Payload (fixed size, 4 + 8k bytes): u32 count | u32 index[k] | f32 value[k].
#include <algorithm>
#include <optional>
#include <vector>

#include "compression/compressor_base.h"
#include "compression/factories.h"
#include "compression/shared_random.h"

namespace overlap {
namespace compress {
namespace {

class TopKCompressor final : public CompressorBase {
 public:
  TopKCompressor(CompressorConfig config, int64_t k, double ratio, bool sampled)
      : CompressorBase(std::move(config)), k_(k), ratio_(ratio), sampled_(sampled) {}

  Combine combine() const override { return Combine::kAllgather; }
  DataType payload_dtype() const override { return DataType::kUint8; }

  absl::StatusOr<size_t> MaxPayloadBytes(size_t n) const override {
    absl::StatusOr<size_t> k = Count(-1, n);
    if (!k.ok()) return k.status();
    return Bytes(*k);
  }

  absl::StatusOr<size_t> Compress(absl::Span<const float> grad, ResidualState& state, int64_t step,
                                  absl::Span<uint8_t> payload) const override {
    absl::StatusOr<size_t> k = Count(state.tensor_id(), grad.size());
    if (!k.ok()) return k.status();
    if (absl::Status s = CheckCompressArgs(grad.size(), state, payload, Bytes(*k)); !s.ok()) {
      return s;
    }
    absl::Span<float> r = state.residual();
    thread_local std::vector<uint64_t> chosen;  // key << 32 | index
    chosen.clear();
    std::optional<uint32_t> sampled_key;
    if (sampled_ && *k > 0) sampled_key = SampledThreshold(grad, r, *k, state.tensor_id(), step);
    if (sampled_key) {
      // The sample already saw grad + residual, so adding and scanning share one pass.
      numeric::AddAndCollectAtLeast(grad, r, *sampled_key, chosen, isa());
    } else {
      numeric::Add(grad, r, isa());
      if (*k > 0) numeric::CollectAtLeast(r, HistogramThreshold(r, *k), chosen, isa());
    }
    if (*k > 0) {
      if (chosen.size() > *k) {
        std::nth_element(chosen.begin(), chosen.begin() + *k, chosen.end(), std::greater<>());
        chosen.resize(*k);
      }
    }
    PayloadAs<uint32_t>(payload, 0, 1)[0] = static_cast<uint32_t>(chosen.size());
    absl::Span<uint32_t> indices = PayloadAs<uint32_t>(payload, 4, *k);
    absl::Span<float> values = PayloadAs<float>(payload, 4 + 4 * *k, *k);
    for (size_t i = 0; i < chosen.size(); ++i) {
      const uint32_t index = static_cast<uint32_t>(chosen[i]);
      indices[i] = index;
      values[i] = r[index];
      r[index] = 0.0f;
    }
    // Unused slots are zeroed so payloads are deterministic bytes.
    std::fill(indices.begin() + chosen.size(), indices.end(), 0u);
    std::fill(values.begin() + chosen.size(), values.end(), 0.0f);
    return Bytes(*k);
  }

  absl::Status Decompress(absl::Span<const uint8_t> payload, ResidualState& state, int64_t step,
                          absl::Span<float> out) const override {
    std::fill(out.begin(), out.end(), 0.0f);
    return DecompressAdd(payload, state, step, out);
  }

  absl::Status DecompressAdd(absl::Span<const uint8_t> payload, const ResidualState& state, int64_t,
                             absl::Span<float> out) const override {
    absl::StatusOr<size_t> k = Count(state.tensor_id(), out.size());
    if (!k.ok()) return k.status();
    if (absl::Status s = CheckDecompressArgs(out.size(), state, payload, Bytes(*k)); !s.ok()) {
      return s;
    }
    const uint32_t count = PayloadAs<uint32_t>(payload, 0, 1)[0];
    absl::Span<const uint32_t> indices = PayloadAs<uint32_t>(payload, 4, *k);
    absl::Span<const float> values = PayloadAs<float>(payload, 4 + 4 * *k, *k);
    if (count > *k) {
      return absl::DataLossError(
          absl::StrCat(Who(state), ": payload claims ", count, " elements, capacity is ", *k));
    }
    for (uint32_t i = 0; i < count; ++i) {
      if (indices[i] >= out.size()) {
        return absl::DataLossError(absl::StrCat(Who(state), ": payload index ", indices[i],
                                                " is outside the tensor of ", out.size()));
      }
      out[indices[i]] += values[i];
    }
    return absl::OkStatus();
  }

 private:
  static size_t Bytes(size_t k) { return 4 + 8 * k; }

  absl::StatusOr<size_t> Count(int64_t tensor_id, size_t n) const {
    if (n > UINT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          "compressor 'topk': tensors of more than 2^32 - 1 elements are not supported, got ", n));
    }
    return SelectCount(*this, tensor_id, n, k_, ratio_);
  }

  // Lowest key of the histogram bin that holds the k-th largest magnitude.
  static uint32_t HistogramThreshold(absl::Span<const float> r, size_t k) {
    std::vector<uint32_t> hist(2048, 0);
    numeric::MagnitudeHistogram(r, absl::MakeSpan(hist));
    size_t above = 0;
    for (size_t bin = hist.size(); bin-- > 0;) {
      above += hist[bin];
      if (above >= k) return static_cast<uint32_t>(bin) << 20;
    }
    return 0;
  }

  // A key that about kOverSelect * k elements reach, from the matching rank in a strided sample
  // of ~16 n / k elements (so ~16 sampled elements lie above the k-th largest). Aiming above k
  // makes a short candidate list that almost always holds the true top k, which nth_element
  // then picks; the sample stays small enough to be cheap for in-cache tensors.
  // The sample reads grad + residual before the residual is updated. nullopt when the tensor is
  // too small for sampling to save anything (the exact path is used then).
  static std::optional<uint32_t> SampledThreshold(absl::Span<const float> g,
                                                  absl::Span<const float> r, size_t k,
                                                  int64_t tensor_id, int64_t step) {
    constexpr double kOverSelect = 1.5;
    const size_t n = r.size();
    const size_t wanted = std::max<size_t>(1024, 16 * (n / k));
    if (wanted >= n / 2) return std::nullopt;
    const size_t stride = n / wanted;
    // A per-step start offset keeps the sample from always hitting the same elements.
    const size_t start = Below(Mix64(StreamKey(0, tensor_id, step)), static_cast<uint32_t>(stride));
    const size_t count = (n - start + stride - 1) / stride;
    const size_t rank = std::min(
        count - 1,
        static_cast<size_t>(kOverSelect * static_cast<double>(k) * count / static_cast<double>(n)));
    // rank is ~24 by construction, so a min-heap of the rank + 1 largest keys beats nth_element
    // over the whole sample: most keys lose one comparison against the heap's top and are gone.
    thread_local std::vector<uint32_t> heap;
    heap.clear();
    for (size_t i = start; i < n; i += stride) {
      const uint32_t key = numeric::MagnitudeKey(g[i] + r[i]);
      if (heap.size() <= rank) {
        heap.push_back(key);
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      } else if (key > heap.front()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<>());
        heap.back() = key;
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      }
    }
    return heap.front();  // the (rank + 1)-th largest sampled key
  }

  int64_t k_;
  double ratio_;
  bool sampled_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Compressor>> MakeTopK(ParamReader& params,
                                                     const CompressorContext&) {
  int64_t k = 0;
  double ratio = 0.0;
  absl::Status size = params.KOrRatio(UINT32_MAX, &k, &ratio);
  if (!size.ok()) return size;
  absl::StatusOr<std::string> method = params.Choice("method", "exact", {"exact", "sampled"});
  if (!method.ok()) return method.status();
  return std::make_unique<TopKCompressor>(params.canonical(), k, ratio, *method == "sampled");
}

}  // namespace compress
}  // namespace overlap
