// Shared plumbing for the compressors: the stored canonical config and the argument checks every
// Compress/Decompress starts with. Internal to compression/.
#ifndef OVERLAP_COMPRESSION_COMPRESSOR_BASE_H_
#define OVERLAP_COMPRESSION_COMPRESSOR_BASE_H_

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compression/compressor.h"
#include "numeric/cpu_kernels.h"

namespace overlap {
namespace compress {

class CompressorBase : public Compressor {
 public:
  explicit CompressorBase(CompressorConfig config) : config_(std::move(config)) {}
  const CompressorConfig& config() const override { return config_; }

 protected:
  // InvalidArgument naming the compressor and tensor when the residual does not match the
  // gradient, or the payload buffer is shorter than `payload_bytes` or not 4-byte aligned.
  absl::Status CheckCompressArgs(size_t grad_size, const ResidualState& state,
                                 absl::Span<const uint8_t> payload, size_t payload_bytes) const {
    if (state.size() != grad_size) {
      return absl::InvalidArgumentError(absl::StrCat(Who(state), ": gradient has ", grad_size,
                                                     " elements but its residual has ",
                                                     state.size()));
    }
    return CheckPayload(state, payload, payload_bytes);
  }

  absl::Status CheckDecompressArgs(size_t out_size, const ResidualState& state,
                                   absl::Span<const uint8_t> payload, size_t payload_bytes) const {
    if (state.size() != out_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          Who(state), ": output has ", out_size, " elements but the tensor has ", state.size()));
    }
    return CheckPayload(state, payload, payload_bytes);
  }

  std::string Who(const ResidualState& state) const {
    return absl::StrCat("compressor '", config_.name, "', tensor ", state.tensor_id());
  }

  static numeric::Isa isa() { return numeric::BestIsa(); }

 private:
  absl::Status CheckPayload(const ResidualState& state, absl::Span<const uint8_t> payload,
                            size_t payload_bytes) const {
    if (payload.size() < payload_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(Who(state), ": payload buffer has ",
                                                     payload.size(), " bytes, ", payload_bytes,
                                                     " needed"));
    }
    if (reinterpret_cast<uintptr_t>(payload.data()) % 4 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(Who(state), ": payload buffer must be 4-byte aligned"));
    }
    return absl::OkStatus();
  }

  CompressorConfig config_;
};

template <typename T>
absl::Span<T> PayloadAs(absl::Span<uint8_t> payload, size_t offset_bytes, size_t count) {
  return absl::MakeSpan(reinterpret_cast<T*>(payload.data() + offset_bytes), count);
}
template <typename T>
absl::Span<const T> PayloadAs(absl::Span<const uint8_t> payload, size_t offset_bytes,
                              size_t count) {
  return absl::MakeConstSpan(reinterpret_cast<const T*>(payload.data() + offset_bytes), count);
}

// How many of `n` elements a ratio/k parameter pair selects: k when given (> 0), else
// round(ratio * n) with at least one. InvalidArgument when k > n.
absl::StatusOr<size_t> SelectCount(const Compressor& c, int64_t tensor_id, size_t n, int64_t k,
                                   double ratio);

}  // namespace compress
}  // namespace overlap

#endif  // OVERLAP_COMPRESSION_COMPRESSOR_BASE_H_
