// numeric/half.h on the device: fp16 and bf16 conversions for the CUDA kernels of collectives/
// (the batched scaled copy) and compression/ (the casts and error-feedback casts), written once.
// Hardware round-to-nearest-even for numbers; half.h's NaN encodings patched in, so that a value
// converted on the GPU has the bits the CPU path gives it.
#ifndef OVERLAP_NUMERIC_CUDA_HALF_CUH_
#define OVERLAP_NUMERIC_CUDA_HALF_CUH_

#include <cuda_fp16.h>

#include <cstdint>

namespace overlap {
namespace numeric {

__device__ __forceinline__ uint16_t ToHalf(float f) {
  if (isnan(f)) return static_cast<uint16_t>(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u);
  return __half_as_ushort(__float2half_rn(f));
}

__device__ __forceinline__ float FromHalf(uint16_t h) {
  if ((h & 0x7fffu) > 0x7c00u) {  // NaN: keep the payload as half.h does (no quiet bit added)
    return __uint_as_float((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7f800000u |
                           (static_cast<uint32_t>(h & 0x3ffu) << 13));
  }
  return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ uint16_t ToBFloat16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float FromBFloat16(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

}  // namespace numeric
}  // namespace overlap

#endif  // OVERLAP_NUMERIC_CUDA_HALF_CUH_
