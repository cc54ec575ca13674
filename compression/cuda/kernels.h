// CUDA compression kernels (built with nvcc inside the Bazel build; see compression/BUILD).
//
// Device-pointer versions of the CPU kernels the compressors use, with the same payload layouts,
// so a GPU executor can compress in place on its stream and the receiving side can decode with
// either implementation:
//   fp16 / bf16  error-feedback casts, bit-identical to numeric/half.h and the CPU kernels;
//   covap        the coarse filter's step (payload = this step's shards, packed in order);
//   topk         exact top-k by three-level radix select, payload u32 count | u32 idx[k] | f32
//   val[k]
//                (pair order may differ from the CPU's; the set is the same);
//   efsign       f32 scale | sign bits (LSB first), bits identical to the CPU's.
// All pointers are device pointers; work is enqueued on `stream` and nothing blocks. Errors
// (launch failures, bad sizes) come back as absl::Status naming the kernel.
#ifndef OVERLAP_COMPRESSION_CUDA_KERNELS_H_
#define OVERLAP_COMPRESSION_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace overlap {
namespace compress {
namespace cuda {

// OK when at least one CUDA device is usable; otherwise Unavailable with the reason (no driver,
// no device), which GPU tests print when they skip.
absl::Status DeviceAvailable();

absl::Status ErrorFeedbackToHalf(const float* grad, float* residual, uint16_t* out, size_t n,
                                 cudaStream_t stream);
absl::Status ErrorFeedbackToBFloat16(const float* grad, float* residual, uint16_t* out, size_t n,
                                     cudaStream_t stream);
// out = float(in), or out += float(in) when `accumulate`.
absl::Status HalfToFloat(const uint16_t* in, float* out, size_t n, bool accumulate,
                         cudaStream_t stream);
absl::Status BFloat16ToFloat(const uint16_t* in, float* out, size_t n, bool accumulate,
                             cudaStream_t stream);

// `shard` is the resolved shard size (covap's default is ceil(n / interval)); alpha from
// CovapAlpha (covap.h).
absl::Status CovapCompress(const float* grad, float* residual, float* payload, size_t n,
                           size_t shard, int interval, int64_t step, float alpha,
                           cudaStream_t stream);
absl::Status CovapDecode(const float* payload, float* out, size_t n, size_t shard, int interval,
                         int64_t step, bool accumulate, cudaStream_t stream);

// `workspace` is a device buffer of TopKWorkspaceBytes(), one per concurrent call.
size_t TopKWorkspaceBytes();
absl::Status TopKCompress(const float* grad, float* residual, uint8_t* payload, size_t n, size_t k,
                          void* workspace, cudaStream_t stream);
absl::Status TopKDecodeAdd(const uint8_t* payload, float* out, size_t n, size_t k,
                           cudaStream_t stream);

size_t EfSignWorkspaceBytes();
absl::Status EfSignCompress(const float* grad, float* residual, uint8_t* payload, size_t n,
                            void* workspace, cudaStream_t stream);
absl::Status EfSignDecodeAdd(const uint8_t* payload, float* out, size_t n, cudaStream_t stream);

}  // namespace cuda
}  // namespace compress
}  // namespace overlap

#endif  // OVERLAP_COMPRESSION_CUDA_KERNELS_H_
