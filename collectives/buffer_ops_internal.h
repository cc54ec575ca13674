// What buffer_ops.cc shares with the CUDA implementation (cuda/cuda_buffer_ops.cc, or no_cuda.cc
// where overlap is built without CUDA). Internal to //collectives:buffer_ops.
#ifndef OVERLAP_COLLECTIVES_BUFFER_OPS_INTERNAL_H_
#define OVERLAP_COLLECTIVES_BUFFER_OPS_INTERNAL_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/buffer_ops.h"

namespace overlap {

// The checks every BufferOps::Copy makes before touching memory (see buffer_ops.h); errors name
// `device` and the offending slice.
absl::Status ValidateCopy(Device device, absl::Span<const CopySlice> slices, DataType dtype,
                          CopyScaling scaling);

// The checks every BufferOps::Accumulate makes (see buffer_ops.h), naming `device`.
absl::Status ValidateAccumulate(Device device, const void* dst, const void* src, int64_t count,
                                DataType dtype);

// CreateBufferOps for a CUDA device: CudaBufferOps, or Unavailable where built without CUDA.
absl::StatusOr<std::unique_ptr<BufferOps>> CreateCudaBufferOps(int index, void* stream);

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_BUFFER_OPS_INTERNAL_H_
