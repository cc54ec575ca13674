// The raw CUDA entry points compiled by nvcc (kernels.cu). Plain types and cudaError_t only, so
// nvcc never sees Abseil; compression/cuda/kernels.h wraps them with absl::Status. Internal.
#ifndef OVERLAP_COMPRESSION_CUDA_KERNELS_CU_H_
#define OVERLAP_COMPRESSION_CUDA_KERNELS_CU_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace overlap {
namespace compress {
namespace cuda_raw {

cudaError_t ErrorFeedbackToHalf(const float* grad, float* residual, uint16_t* out, size_t n,
                                cudaStream_t stream);
cudaError_t ErrorFeedbackToBFloat16(const float* grad, float* residual, uint16_t* out, size_t n,
                                    cudaStream_t stream);
cudaError_t HalfToFloat(const uint16_t* in, float* out, size_t n, bool accumulate,
                        cudaStream_t stream);
cudaError_t BFloat16ToFloat(const uint16_t* in, float* out, size_t n, bool accumulate,
                            cudaStream_t stream);

cudaError_t CovapCompress(const float* grad, float* residual, float* payload, size_t n,
                          size_t shard, int interval, int64_t step, float alpha,
                          cudaStream_t stream);
cudaError_t CovapDecode(const float* payload, float* out, size_t n, size_t shard, int interval,
                        int64_t step, bool accumulate, cudaStream_t stream);

// Device workspace for TopKCompress, in bytes.
size_t TopKWorkspaceBytes();
cudaError_t TopKCompress(const float* grad, float* residual, uint8_t* payload, size_t n, size_t k,
                         void* workspace, cudaStream_t stream);
cudaError_t TopKDecodeAdd(const uint8_t* payload, float* out, size_t n, size_t k,
                          cudaStream_t stream);

size_t EfSignWorkspaceBytes();
cudaError_t EfSignCompress(const float* grad, float* residual, uint8_t* payload, size_t n,
                           void* workspace, cudaStream_t stream);
cudaError_t EfSignDecodeAdd(const uint8_t* payload, float* out, size_t n, cudaStream_t stream);

}  // namespace cuda_raw
}  // namespace compress
}  // namespace overlap

#endif  // OVERLAP_COMPRESSION_CUDA_KERNELS_CU_H_
