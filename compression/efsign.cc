// "efsign": 1-bit sign compression with a per-tensor scale and error feedback (EF-signSGD,
// Karimireddy et al. 2019). With v = grad + residual the payload is scale = ||v||_1 / n and the
// sign bits of v; the decoded value is scale * sign(v) and the residual keeps v - scale * sign(v).
//
// Bound (tested): ||residual'||^2 = ||v||^2 - ||v||_1^2 / n <= (1 - 1/n) ||v||^2, so the
// residual never grows past the input and shrinks the more evenly v is spread.
//
// Payload (4 + ceil(n/8) bytes): f32 scale | sign bits, LSB first, 1 = negative. Gathered, not
// summed: sign bits do not add.
#include <algorithm>

#include "compression/compressor_base.h"
#include "compression/factories.h"

namespace overlap {
namespace compress {
namespace {

class EfSignCompressor final : public CompressorBase {
 public:
  using CompressorBase::CompressorBase;

  Combine combine() const override { return Combine::kAllgather; }
  DataType payload_dtype() const override { return DataType::kUint8; }

  absl::StatusOr<size_t> MaxPayloadBytes(size_t n) const override { return Bytes(n); }

  absl::StatusOr<size_t> Compress(absl::Span<const float> grad, ResidualState& state, int64_t,
                                  absl::Span<uint8_t> payload) const override {
    const size_t n = grad.size();
    if (absl::Status s = CheckCompressArgs(n, state, payload, Bytes(n)); !s.ok()) return s;
    const double l1 = numeric::AddAndSumAbs(grad, state.residual(), isa());
    const float scale = n == 0 ? 0.0f : static_cast<float>(l1 / static_cast<double>(n));
    PayloadAs<float>(payload, 0, 1)[0] = scale;
    numeric::SignPack(state.residual(), scale, payload.subspan(4, (n + 7) / 8), isa());
    return Bytes(n);
  }

  absl::Status Decompress(absl::Span<const uint8_t> payload, ResidualState& state, int64_t step,
                          absl::Span<float> out) const override {
    std::fill(out.begin(), out.end(), 0.0f);
    return DecompressAdd(payload, state, step, out);
  }

  absl::Status DecompressAdd(absl::Span<const uint8_t> payload, const ResidualState& state, int64_t,
                             absl::Span<float> out) const override {
    const size_t n = out.size();
    if (absl::Status s = CheckDecompressArgs(n, state, payload, Bytes(n)); !s.ok()) return s;
    numeric::SignUnpackAdd(payload.subspan(4, (n + 7) / 8), PayloadAs<float>(payload, 0, 1)[0], out,
                           isa());
    return absl::OkStatus();
  }

 private:
  static size_t Bytes(size_t n) { return 4 + (n + 7) / 8; }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Compressor>> MakeEfSign(ParamReader& params,
                                                       const CompressorContext&) {
  return std::make_unique<EfSignCompressor>(params.canonical());
}

}  // namespace compress
}  // namespace overlap
