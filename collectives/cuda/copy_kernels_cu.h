// The batched copy kernel compiled by nvcc (copy_kernels.cu). Plain types and cudaError_t only,
// so nvcc never sees Abseil; cuda_buffer_ops.cc builds the slice table and wraps the errors.
// Internal to //collectives:buffer_ops.
#ifndef OVERLAP_COLLECTIVES_CUDA_COPY_KERNELS_CU_H_
#define OVERLAP_COLLECTIVES_CUDA_COPY_KERNELS_CU_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace overlap {
namespace cuda_raw {

// The kernel splits every slice into chunks of this many bytes (the last one shorter) and gives
// each chunk to one warp, so a batch of tiny slices and a batch of a few huge ones both spread
// over the whole GPU. A multiple of 16 (one vector) and of every element size.
constexpr int64_t kCopyChunkBytes = 4096;

// One row of the slice table, in device memory. Rows with bytes == 0 must be left out, and
// first_chunk must be the running sum of the earlier rows' chunk counts (ceil(bytes /
// kCopyChunkBytes)), so the kernel finds a chunk's row by binary search. Pointers are aligned to
// the element size; src == nullptr writes zeros.
struct CopySliceRow {
  void* dst;
  const void* src;
  int64_t bytes;
  int64_t first_chunk;
};

// Element types, one per DataType (collectives/dtype.h), which nvcc does not include.
enum class CopyElement : int {
  kUint8,
  kInt8,
  kInt32,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
};

// Launches one kernel over `rows` (a device pointer to `num_rows` rows holding `num_chunks` chunks
// in all) on `stream`: floating-point elements are multiplied by `factor` (fp16/bf16 through
// fp32, fp32 by float(factor)), integers divided by `divisor` rounding toward zero, with the
// results bit-for-bit those of collectives/scaling.cc on x86 (NaN payloads included). factor ==
// 1 or divisor == 1 copies bytes unchanged. Returns the launch error, if any.
cudaError_t BatchedCopy(const CopySliceRow* rows, int64_t num_rows, int64_t num_chunks,
                        CopyElement element, double factor, int64_t divisor, cudaStream_t stream);

// Launches dst[i] += src[i] * factor over `count` elements of float (is_double false, with
// float(factor)) or double on `stream`, rounding each multiply and add on its own as the CPU does
// (no fused multiply-add); factor == 1 adds src unscaled. Returns the launch error, if any.
cudaError_t Accumulate(void* dst, const void* src, int64_t count, bool is_double, double factor,
                       cudaStream_t stream);

}  // namespace cuda_raw
}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_CUDA_COPY_KERNELS_CU_H_
