// CUDA compression in a build without the CUDA toolkit: every CUDA tensor was already refused at
// submission, so this only says why.
#include "runtime/planes/cuda_compression.h"

namespace overlap {

absl::Status CudaCompressionSupports(const std::string&) {
  return absl::UnavailableError("overlap was built without CUDA");
}

absl::StatusOr<std::unique_ptr<CudaCompressor>> CudaCompressor::Create(
    const compress::Compressor&) {
  return absl::UnavailableError("overlap was built without CUDA");
}

}  // namespace overlap
