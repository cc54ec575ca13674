// "none": the gradient (plus any residual restored from a checkpoint) sent as float32.
#include "compression/compressor_base.h"
#include "compression/factories.h"

namespace overlap {
namespace compress {
namespace {

class NoneCompressor final : public CompressorBase {
 public:
  using CompressorBase::CompressorBase;

  Combine combine() const override { return Combine::kAllreduce; }
  DataType payload_dtype() const override { return DataType::kFloat32; }

  absl::StatusOr<size_t> MaxPayloadBytes(size_t n) const override { return n * sizeof(float); }

  absl::StatusOr<size_t> Compress(absl::Span<const float> grad, ResidualState& state, int64_t,
                                  absl::Span<uint8_t> payload) const override {
    const size_t bytes = grad.size() * sizeof(float);
    if (absl::Status s = CheckCompressArgs(grad.size(), state, payload, bytes); !s.ok()) return s;
    // alpha = 1 sends grad + residual and leaves an exactly zero residual.
    numeric::SendWithResidual(grad, state.residual(), 1.0f,
                              PayloadAs<float>(payload, 0, grad.size()), isa());
    return bytes;
  }

  absl::Status Decompress(absl::Span<const uint8_t> payload, ResidualState& state, int64_t,
                          absl::Span<float> out) const override {
    const size_t bytes = out.size() * sizeof(float);
    if (absl::Status s = CheckDecompressArgs(out.size(), state, payload, bytes); !s.ok()) return s;
    std::copy_n(PayloadAs<float>(payload, 0, out.size()).data(), out.size(), out.data());
    return absl::OkStatus();
  }

  absl::Status DecompressAdd(absl::Span<const uint8_t> payload, const ResidualState& state, int64_t,
                             absl::Span<float> out) const override {
    const size_t bytes = out.size() * sizeof(float);
    if (absl::Status s = CheckDecompressArgs(out.size(), state, payload, bytes); !s.ok()) return s;
    numeric::Add(PayloadAs<float>(payload, 0, out.size()), out, isa());
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Compressor>> MakeNone(ParamReader& params,
                                                     const CompressorContext&) {
  return std::make_unique<NoneCompressor>(params.canonical());
}

}  // namespace compress
}  // namespace overlap
