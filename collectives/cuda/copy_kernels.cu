// The batched copy behind CudaBufferOps::Copy: one launch for a whole batch of slices.
//
// Every slice is cut into kCopyChunkBytes chunks and chunk c goes to warp c of the grid, which
// finds its slice by binary search over the table's first_chunk column. Tiny slices then cost one
// warp each and huge ones spread over every SM, with no per-slice launch. A chunk whose dst and
// src are 16-byte aligned moves in 16-byte vectors (eight in flight per lane); any other chunk
// moves element by element, still eight loads in flight per lane before the stores.
//
// The element operations reproduce collectives/scaling.cc as compiled for x86, bit for bit:
// products are rounded on their own (never fused), fp16/bf16 go through fp32 with half.h's
// rounding, and NaNs come out as x86 makes them (see MulAsCpu).
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <cstring>

#include "collectives/cuda/copy_kernels_cu.h"
#include "numeric/cuda_half.cuh"

namespace overlap {
namespace cuda_raw {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kVectorsPerLane = static_cast<int>(kCopyChunkBytes / (32 * 16));
static_assert(kVectorsPerLane * 32 * 16 == kCopyChunkBytes, "a chunk is whole vectors per lane");
// Loads in flight per lane on the element-by-element path.
constexpr int kElementBatch = 8;

// x * f as x86 SSE computes it. The GPU returns its canonical NaN 0x7fffffff for any NaN result;
// x86 returns the NaN operand with the quiet bit set, and for inf * 0 its default NaN, which is
// negative (0xffc00000). The sign and payload survive into bf16, and the sign into fp16.
__device__ __forceinline__ float MulAsCpu(float x, float f) {
  if (isnan(x)) return __uint_as_float(__float_as_uint(x) | 0x00400000u);
  if (isnan(f)) return __uint_as_float(__float_as_uint(f) | 0x00400000u);
  const float p = __fmul_rn(x, f);
  return isnan(p) ? __uint_as_float(0xffc00000u) : p;
}

__device__ __forceinline__ double MulAsCpu(double x, double f) {
  constexpr unsigned long long kQuiet = 0x0008000000000000ull;
  constexpr unsigned long long kDefaultNaN = 0xfff8000000000000ull;
  const auto bits = [](double d) {
    return static_cast<unsigned long long>(__double_as_longlong(d));
  };
  const auto value = [](unsigned long long u) {
    return __longlong_as_double(static_cast<long long>(u));
  };
  if (isnan(x)) return value(bits(x) | kQuiet);
  if (isnan(f)) return value(bits(f) | kQuiet);
  const double p = __dmul_rn(x, f);
  return isnan(p) ? value(kDefaultNaN) : p;
}

using numeric::FromBFloat16;
using numeric::FromHalf;
using numeric::ToBFloat16;
using numeric::ToHalf;

// ---- what happens to one element ----

struct Identity {
  template <typename T>
  __device__ __forceinline__ T operator()(T x) const {
    return x;
  }
};

struct ScaleFloat {
  float factor;
  __device__ __forceinline__ float operator()(float x) const { return MulAsCpu(x, factor); }
};

struct ScaleDouble {
  double factor;
  __device__ __forceinline__ double operator()(double x) const { return MulAsCpu(x, factor); }
};

struct ScaleHalf {
  float factor;
  __device__ __forceinline__ uint16_t operator()(uint16_t h) const {
    return ToHalf(MulAsCpu(FromHalf(h), factor));
  }
};

struct ScaleBFloat16 {
  float factor;
  __device__ __forceinline__ uint16_t operator()(uint16_t h) const {
    return ToBFloat16(MulAsCpu(FromBFloat16(h), factor));
  }
};

// Integer average: the quotient rounds toward zero, as in C++ (divisor >= 1).
struct DivideBy {
  int64_t divisor;
  template <typename T>
  __device__ __forceinline__ T operator()(T x) const {
    return static_cast<T>(static_cast<int64_t>(x) / divisor);
  }
};

// ---- moving one chunk ----

template <typename T, typename Op>
__device__ __forceinline__ uint4 ApplyToVector(uint4 v, const Op& op) {
  constexpr int kElements = 16 / sizeof(T);
  T e[kElements];
  memcpy(e, &v, 16);
#pragma unroll
  for (int i = 0; i < kElements; ++i) e[i] = op(e[i]);
  memcpy(&v, e, 16);
  return v;
}

// `bytes` (a multiple of sizeof(T)) from src to dst, element by element, lanes interleaved. Each
// lane reads its batch before writing it, so dst == src is safe: no lane touches another's
// elements.
template <typename T, typename Op>
__device__ __forceinline__ void CopyElements(char* dst, const char* src, int bytes, int lane,
                                             const Op& op) {
  T* d = reinterpret_cast<T*>(dst);
  const T* s = reinterpret_cast<const T*>(src);
  const int n = bytes / static_cast<int>(sizeof(T));
  if (s == nullptr) {
    for (int i = lane; i < n; i += 32) d[i] = T();
    return;
  }
  for (int base = lane; base < n; base += 32 * kElementBatch) {
    T v[kElementBatch];
#pragma unroll
    for (int k = 0; k < kElementBatch; ++k) {
      const int i = base + 32 * k;
      if (i < n) v[k] = s[i];
    }
#pragma unroll
    for (int k = 0; k < kElementBatch; ++k) {
      const int i = base + 32 * k;
      if (i < n) d[i] = op(v[k]);
    }
  }
}

// The same with dst and src 16-byte aligned: whole vectors, then the elements past the last one.
template <typename T, typename Op>
__device__ __forceinline__ void CopyVectors(char* dst, const char* src, int bytes, int lane,
                                            const Op& op) {
  uint4* d = reinterpret_cast<uint4*>(dst);
  const uint4* s = reinterpret_cast<const uint4*>(src);
  const int vectors = bytes / 16;
  if (s == nullptr) {
    for (int i = lane; i < vectors; i += 32) d[i] = make_uint4(0, 0, 0, 0);
  } else if (bytes == kCopyChunkBytes) {
    uint4 v[kVectorsPerLane];
#pragma unroll
    for (int k = 0; k < kVectorsPerLane; ++k) v[k] = s[32 * k + lane];
#pragma unroll
    for (int k = 0; k < kVectorsPerLane; ++k) d[32 * k + lane] = ApplyToVector<T>(v[k], op);
    return;
  } else {
    for (int i = lane; i < vectors; i += 32) d[i] = ApplyToVector<T>(s[i], op);
  }
  CopyElements<T>(dst + 16 * vectors, s == nullptr ? nullptr : src + 16 * vectors,
                  bytes - 16 * vectors, lane, op);
}

// The last row whose first chunk is at or before `chunk`: the row holding it, since empty rows
// are left out of the table.
__device__ __forceinline__ int64_t FindRow(const CopySliceRow* rows, int64_t num_rows,
                                           int64_t chunk) {
  int64_t lo = 0, hi = num_rows - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (rows[mid].first_chunk <= chunk) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads)
    BatchedCopyKernel(const CopySliceRow* rows, int64_t num_rows, int64_t num_chunks, Op op) {
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (chunk >= num_chunks) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const CopySliceRow row = rows[FindRow(rows, num_rows, chunk)];
  const int64_t offset = (chunk - row.first_chunk) * kCopyChunkBytes;
  const int bytes =
      static_cast<int>(row.bytes - offset < kCopyChunkBytes ? row.bytes - offset : kCopyChunkBytes);
  char* dst = static_cast<char*>(row.dst) + offset;
  const char* src = row.src == nullptr ? nullptr : static_cast<const char*>(row.src) + offset;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15u) == 0) {
    CopyVectors<T>(dst, src, bytes, lane, op);
  } else {
    CopyElements<T>(dst, src, bytes, lane, op);
  }
}

template <typename T, typename Op>
cudaError_t Launch(const CopySliceRow* rows, int64_t num_rows, int64_t num_chunks, Op op,
                   cudaStream_t stream) {
  const int64_t blocks = (num_chunks + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > INT_MAX) return cudaErrorInvalidValue;
  BatchedCopyKernel<T, Op>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(rows, num_rows, num_chunks, op);
  return cudaGetLastError();
}

}  // namespace

cudaError_t BatchedCopy(const CopySliceRow* rows, int64_t num_rows, int64_t num_chunks,
                        CopyElement element, double factor, int64_t divisor, cudaStream_t stream) {
  if (num_chunks == 0) return cudaSuccess;
  if (num_rows <= 0 || divisor < 1) return cudaErrorInvalidValue;
  // As scaling.cc: factor == 1 and divisor == 1 move bytes unchanged (signalling NaNs included).
  const bool copy_only = factor == 1.0 && divisor == 1;
  const float f = static_cast<float>(factor);
  switch (element) {
    case CopyElement::kUint8:
      return copy_only ? Launch<uint8_t>(rows, num_rows, num_chunks, Identity{}, stream)
                       : Launch<uint8_t>(rows, num_rows, num_chunks, DivideBy{divisor}, stream);
    case CopyElement::kInt8:
      return copy_only ? Launch<uint8_t>(rows, num_rows, num_chunks, Identity{}, stream)
                       : Launch<int8_t>(rows, num_rows, num_chunks, DivideBy{divisor}, stream);
    case CopyElement::kInt32:
      return copy_only ? Launch<uint32_t>(rows, num_rows, num_chunks, Identity{}, stream)
                       : Launch<int32_t>(rows, num_rows, num_chunks, DivideBy{divisor}, stream);
    case CopyElement::kInt64:
      return copy_only ? Launch<uint64_t>(rows, num_rows, num_chunks, Identity{}, stream)
                       : Launch<int64_t>(rows, num_rows, num_chunks, DivideBy{divisor}, stream);
    case CopyElement::kFloat16:
      return copy_only ? Launch<uint16_t>(rows, num_rows, num_chunks, Identity{}, stream)
                       : Launch<uint16_t>(rows, num_rows, num_chunks, ScaleHalf{f}, stream);
    case CopyElement::kBFloat16:
      return copy_only ? Launch<uint16_t>(rows, num_rows, num_chunks, Identity{}, stream)
                       : Launch<uint16_t>(rows, num_rows, num_chunks, ScaleBFloat16{f}, stream);
    case CopyElement::kFloat32:
      return copy_only ? Launch<uint32_t>(rows, num_rows, num_chunks, Identity{}, stream)
                       : Launch<float>(rows, num_rows, num_chunks, ScaleFloat{f}, stream);
    case CopyElement::kFloat64:
      return copy_only ? Launch<uint64_t>(rows, num_rows, num_chunks, Identity{}, stream)
                       : Launch<double>(rows, num_rows, num_chunks, ScaleDouble{factor}, stream);
  }
  return cudaErrorInvalidValue;
}

namespace {

__global__ void AccumulateFloat(float* dst, const float* src, int64_t count, float factor,
                                bool scaled) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = __fadd_rn(dst[i], scaled ? __fmul_rn(src[i], factor) : src[i]);
  }
}

__global__ void AccumulateDouble(double* dst, const double* src, int64_t count, double factor,
                                 bool scaled) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = __dadd_rn(dst[i], scaled ? __dmul_rn(src[i], factor) : src[i]);
  }
}

}  // namespace

cudaError_t Accumulate(void* dst, const void* src, int64_t count, bool is_double, double factor,
                       cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (count < 0) return cudaErrorInvalidValue;
  const int64_t wanted = (count + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65535 ? wanted : 65535);
  const bool scaled = factor != 1.0;
  if (is_double) {
    AccumulateDouble<<<blocks, kThreads, 0, stream>>>(
        static_cast<double*>(dst), static_cast<const double*>(src), count, factor, scaled);
  } else {
    AccumulateFloat<<<blocks, kThreads, 0, stream>>>(static_cast<float*>(dst),
                                                     static_cast<const float*>(src), count,
                                                     static_cast<float>(factor), scaled);
  }
  return cudaGetLastError();
}

}  // namespace cuda_raw
}  // namespace overlap
