// "fp16" and "bf16": round-to-nearest-even casts whose rounding error stays in the residual.
// Payloads are arrays of fp16 / bf16 elements that the executor sums in that dtype.
//
// ef=0 turns error feedback off (Horovod's fp16 compression): the cast reads only the gradient
// and writes only the payload, half the memory traffic, and the rounding error (2^-11 relative
// for fp16, 2^-8 for bf16) and any overflow to inf are dropped rather than kept.
#include "compression/compressor_base.h"
#include "compression/factories.h"

namespace overlap {
namespace compress {
namespace {

struct Fp16Kernels {
  static constexpr DataType kDtype = DataType::kFloat16;
  static constexpr auto kEncode = numeric::ErrorFeedbackToHalf;
  static constexpr auto kCast = numeric::FloatToHalf;
  static constexpr auto kDecode = numeric::HalfToFloat;
  static constexpr auto kDecodeAdd = numeric::HalfToFloatAdd;
};

struct BFloat16Kernels {
  static constexpr DataType kDtype = DataType::kBFloat16;
  static constexpr auto kEncode = numeric::ErrorFeedbackToBFloat16;
  static constexpr auto kCast = numeric::FloatToBFloat16;
  static constexpr auto kDecode = numeric::BFloat16ToFloat;
  static constexpr auto kDecodeAdd = numeric::BFloat16ToFloatAdd;
};

template <typename K>
class CastCompressor final : public CompressorBase {
 public:
  CastCompressor(CompressorConfig config, bool error_feedback)
      : CompressorBase(std::move(config)), error_feedback_(error_feedback) {}

  Combine combine() const override { return Combine::kAllreduce; }
  DataType payload_dtype() const override { return K::kDtype; }

  absl::StatusOr<size_t> MaxPayloadBytes(size_t n) const override { return n * sizeof(uint16_t); }

  absl::StatusOr<size_t> Compress(absl::Span<const float> grad, ResidualState& state, int64_t,
                                  absl::Span<uint8_t> payload) const override {
    const size_t bytes = grad.size() * sizeof(uint16_t);
    if (absl::Status s = CheckCompressArgs(grad.size(), state, payload, bytes); !s.ok()) return s;
    if (error_feedback_) {
      K::kEncode(grad, state.residual(), PayloadAs<uint16_t>(payload, 0, grad.size()), isa());
    } else {
      K::kCast(grad, PayloadAs<uint16_t>(payload, 0, grad.size()), isa());
    }
    return bytes;
  }

  absl::Status Decompress(absl::Span<const uint8_t> payload, ResidualState& state, int64_t,
                          absl::Span<float> out) const override {
    const size_t bytes = out.size() * sizeof(uint16_t);
    if (absl::Status s = CheckDecompressArgs(out.size(), state, payload, bytes); !s.ok()) return s;
    K::kDecode(PayloadAs<uint16_t>(payload, 0, out.size()), out, isa());
    return absl::OkStatus();
  }

  absl::Status DecompressAdd(absl::Span<const uint8_t> payload, const ResidualState& state, int64_t,
                             absl::Span<float> out) const override {
    const size_t bytes = out.size() * sizeof(uint16_t);
    if (absl::Status s = CheckDecompressArgs(out.size(), state, payload, bytes); !s.ok()) return s;
    K::kDecodeAdd(PayloadAs<uint16_t>(payload, 0, out.size()), out, isa());
    return absl::OkStatus();
  }

 private:
  bool error_feedback_;
};

absl::StatusOr<bool> ErrorFeedbackParam(ParamReader& params) {
  absl::StatusOr<int64_t> ef = params.Int("ef", 1, 0, 1);
  if (!ef.ok()) return ef.status();
  return *ef == 1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Compressor>> MakeFp16(ParamReader& params,
                                                     const CompressorContext&) {
  absl::StatusOr<bool> ef = ErrorFeedbackParam(params);
  if (!ef.ok()) return ef.status();
  return std::make_unique<CastCompressor<Fp16Kernels>>(params.canonical(), *ef);
}

absl::StatusOr<std::unique_ptr<Compressor>> MakeBf16(ParamReader& params,
                                                     const CompressorContext&) {
  absl::StatusOr<bool> ef = ErrorFeedbackParam(params);
  if (!ef.ok()) return ef.status();
  return std::make_unique<CastCompressor<BFloat16Kernels>>(params.canonical(), *ef);
}

}  // namespace compress
}  // namespace overlap
