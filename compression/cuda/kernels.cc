#include "compression/cuda/kernels.h"

#include "absl/strings/str_cat.h"
#include "compression/cuda/kernels_cu.h"

namespace overlap {
namespace compress {
namespace cuda {
namespace {

absl::Status Check(cudaError_t err, const char* kernel, size_t n) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("CUDA compression kernel ", kernel, " on ", n,
                                          " elements failed: ", cudaGetErrorString(err)));
}

}  // namespace

absl::Status DeviceAvailable() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat("cudaGetDeviceCount failed: ", cudaGetErrorString(err)));
  }
  if (count == 0) return absl::UnavailableError("cudaGetDeviceCount found no CUDA device");
  return absl::OkStatus();
}

absl::Status ErrorFeedbackToHalf(const float* grad, float* residual, uint16_t* out, size_t n,
                                 cudaStream_t stream) {
  return Check(cuda_raw::ErrorFeedbackToHalf(grad, residual, out, n, stream), "ef_fp16", n);
}

absl::Status ErrorFeedbackToBFloat16(const float* grad, float* residual, uint16_t* out, size_t n,
                                     cudaStream_t stream) {
  return Check(cuda_raw::ErrorFeedbackToBFloat16(grad, residual, out, n, stream), "ef_bf16", n);
}

absl::Status HalfToFloat(const uint16_t* in, float* out, size_t n, bool accumulate,
                         cudaStream_t stream) {
  return Check(cuda_raw::HalfToFloat(in, out, n, accumulate, stream), "fp16_to_float", n);
}

absl::Status BFloat16ToFloat(const uint16_t* in, float* out, size_t n, bool accumulate,
                             cudaStream_t stream) {
  return Check(cuda_raw::BFloat16ToFloat(in, out, n, accumulate, stream), "bf16_to_float", n);
}

absl::Status CovapCompress(const float* grad, float* residual, float* payload, size_t n,
                           size_t shard, int interval, int64_t step, float alpha,
                           cudaStream_t stream) {
  if (interval < 1 || (n > 0 && shard == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("covap CUDA kernel: R = ", interval, " and shard = ", shard, " must be >= 1"));
  }
  return Check(
      cuda_raw::CovapCompress(grad, residual, payload, n, shard, interval, step, alpha, stream),
      "covap_compress", n);
}

absl::Status CovapDecode(const float* payload, float* out, size_t n, size_t shard, int interval,
                         int64_t step, bool accumulate, cudaStream_t stream) {
  if (interval < 1 || (n > 0 && shard == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("covap CUDA kernel: R = ", interval, " and shard = ", shard, " must be >= 1"));
  }
  return Check(cuda_raw::CovapDecode(payload, out, n, shard, interval, step, accumulate, stream),
               "covap_decode", n);
}

size_t TopKWorkspaceBytes() { return cuda_raw::TopKWorkspaceBytes(); }

absl::Status TopKCompress(const float* grad, float* residual, uint8_t* payload, size_t n, size_t k,
                          void* workspace, cudaStream_t stream) {
  if (k == 0 || k > n || n > 0xffffffffu) {
    return absl::InvalidArgumentError(absl::StrCat("topk CUDA kernel: k = ", k,
                                                   " is out of range for a tensor of ", n,
                                                   " elements (need 1 <= k <= n < 2^32)"));
  }
  return Check(cuda_raw::TopKCompress(grad, residual, payload, n, k, workspace, stream),
               "topk_compress", n);
}

absl::Status TopKDecodeAdd(const uint8_t* payload, float* out, size_t n, size_t k,
                           cudaStream_t stream) {
  return Check(cuda_raw::TopKDecodeAdd(payload, out, n, k, stream), "topk_decode", n);
}

size_t EfSignWorkspaceBytes() { return cuda_raw::EfSignWorkspaceBytes(); }

absl::Status EfSignCompress(const float* grad, float* residual, uint8_t* payload, size_t n,
                            void* workspace, cudaStream_t stream) {
  return Check(cuda_raw::EfSignCompress(grad, residual, payload, n, workspace, stream),
               "efsign_compress", n);
}

absl::Status EfSignDecodeAdd(const uint8_t* payload, float* out, size_t n, cudaStream_t stream) {
  return Check(cuda_raw::EfSignDecodeAdd(payload, out, n, stream), "efsign_decode", n);
}

}  // namespace cuda
}  // namespace compress
}  // namespace overlap
