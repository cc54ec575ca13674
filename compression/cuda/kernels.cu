// CUDA versions of the fp16/bf16, covap, top-k and efsign kernels. Semantics match the CPU
// kernels (compression/kernels/cpu.h) element for element: the casts are bit-identical to
// collectives/half.h (hardware RNE for numbers, half.h's NaN encoding patched in), covap uses
// explicitly rounded multiply/add (never fused) so its residual split is the CPU's, top-k selects
// exactly the k largest magnitudes (order of the pairs may differ), efsign's bits are identical and
// its scale differs only by summation order.
#include <cuda_fp16.h>

#include "compression/cuda/kernels_cu.h"

namespace overlap {
namespace compress {
namespace cuda_raw {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 4096 ? (b == 0 ? 1 : b) : 4096);
}

#define GRID_STRIDE(i, n)                                                              \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

// g + r as the CPU computes it: a GPU returns the canonical NaN 0x7fffffff whenever an operand is
// NaN, while x86 returns the NaN operand itself with its quiet bit set, and bf16 keeps those bits.
__device__ __forceinline__ float AddAsCpu(float g, float r) {
  if (isnan(g)) return __uint_as_float(__float_as_uint(g) | 0x00400000u);
  if (isnan(r)) return __uint_as_float(__float_as_uint(r) | 0x00400000u);
  return __fadd_rn(g, r);
}

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

__global__ void EfHalfKernel(const float* g, float* r, uint16_t* out, size_t n) {
  GRID_STRIDE(i, n) {
    const float v = AddAsCpu(g[i], r[i]);
    if (isfinite(v)) {
      const uint16_t h = ToHalf(fminf(fmaxf(v, -65504.0f), 65504.0f));
      out[i] = h;
      r[i] = __fsub_rn(v, FromHalf(h));
    } else {
      out[i] = ToHalf(v);
      r[i] = 0.0f;
    }
  }
}

__global__ void EfBFloat16Kernel(const float* g, float* r, uint16_t* out, size_t n) {
  const float max = __uint_as_float(0x7f7f0000u);
  GRID_STRIDE(i, n) {
    const float v = AddAsCpu(g[i], r[i]);
    if (isfinite(v)) {
      const uint16_t h = ToBFloat16(fminf(fmaxf(v, -max), max));
      out[i] = h;
      r[i] = __fsub_rn(v, FromBFloat16(h));
    } else {
      out[i] = ToBFloat16(v);
      r[i] = 0.0f;
    }
  }
}

__global__ void HalfToFloatKernel(const uint16_t* in, float* out, size_t n, bool accumulate) {
  GRID_STRIDE(i, n) out[i] = accumulate ? __fadd_rn(out[i], FromHalf(in[i])) : FromHalf(in[i]);
}

__global__ void BFloat16ToFloatKernel(const uint16_t* in, float* out, size_t n, bool accumulate) {
  GRID_STRIDE(i, n) {
    out[i] = accumulate ? __fadd_rn(out[i], FromBFloat16(in[i])) : FromBFloat16(in[i]);
  }
}

// Covap's shard schedule for element i: whether its shard goes this step, and where in the
// payload it lands (sent shards are packed in order; only the last shard can be short).
struct CovapSlot {
  bool sent;
  size_t offset;
};

__device__ __forceinline__ CovapSlot CovapLocate(size_t i, size_t shard, int interval,
                                                 int64_t phase) {
  const size_t g = i / shard;
  const bool sent = (static_cast<int64_t>(g % interval) + phase) % interval == 0;
  // The first sent shard is p = (interval - phase) % interval; earlier sent shards: p, p+R, ...
  const size_t p = static_cast<size_t>((interval - phase) % interval);
  const size_t before = g > p ? (g - p + interval - 1) / interval : 0;
  return {sent, before * shard + (i - g * shard)};
}

__global__ void CovapCompressKernel(const float* g, float* r, float* payload, size_t n,
                                    size_t shard, int interval, int64_t phase, float alpha) {
  GRID_STRIDE(i, n) {
    const CovapSlot slot = CovapLocate(i, shard, interval, phase);
    if (slot.sent) {
      const float t = __fmul_rn(alpha, r[i]);
      payload[slot.offset] = __fadd_rn(g[i], t);
      r[i] = __fsub_rn(r[i], t);
    } else {
      r[i] = __fadd_rn(r[i], g[i]);
    }
  }
}

__global__ void CovapDecodeKernel(const float* payload, float* out, size_t n, size_t shard,
                                  int interval, int64_t phase, bool accumulate) {
  GRID_STRIDE(i, n) {
    const CovapSlot slot = CovapLocate(i, shard, interval, phase);
    const float v = slot.sent ? payload[slot.offset] : 0.0f;
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  }
}

// ---- top-k: three-level radix select on the magnitude key (bits 30..20, 19..10, 9..0) ----

struct TopKState {
  uint32_t prefix;      // key bits fixed so far
  uint32_t need;        // how many more elements to take at or below the current prefix
  uint32_t threshold;   // the k-th largest key, once known
  uint32_t take_equal;  // how many elements equal to threshold are sent
  uint32_t count;       // slots used in the payload
  uint32_t ties;        // elements equal to threshold seen by the collect kernel
};

struct TopKWorkspace {
  uint32_t hist[2048];
  TopKState state;
};

__device__ __forceinline__ uint32_t Key(float x) { return __float_as_uint(x) & 0x7fffffffu; }

// Everything stays on the stream: no host round trip between the levels.
__global__ void TopKInitKernel(TopKWorkspace* ws, uint32_t k) {
  for (int b = threadIdx.x; b < 2048; b += blockDim.x) ws->hist[b] = 0;
  if (threadIdx.x == 0) ws->state = TopKState{0, k, 0, 0, 0, 0};
}

// Level 0 also performs residual += grad.
__global__ void TopKHistogramKernel(const float* g, float* r, size_t n, TopKWorkspace* ws,
                                    int level) {
  __shared__ uint32_t local[2048];
  for (int b = threadIdx.x; b < 2048; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const uint32_t prefix = ws->state.prefix;
  GRID_STRIDE(i, n) {
    float v = r[i];
    if (level == 0) {
      v = __fadd_rn(v, g[i]);
      r[i] = v;
    }
    const uint32_t key = Key(v);
    if (level == 0) {
      atomicAdd(&local[key >> 20], 1u);
    } else if (level == 1 && (key >> 20) == prefix) {
      atomicAdd(&local[(key >> 10) & 0x3ffu], 1u);
    } else if (level == 2 && (key >> 10) == prefix) {
      atomicAdd(&local[key & 0x3ffu], 1u);
    }
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 2048; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&ws->hist[b], local[b]);
  }
}

// One thread: walks the bins from the top until `need` elements are covered, narrows the prefix,
// and clears the histogram for the next level.
__global__ void TopKPickBinKernel(TopKWorkspace* ws, int level, uint8_t* payload, uint32_t k) {
  TopKState& s = ws->state;
  const int bins = level == 0 ? 2048 : 1024;
  uint32_t above = 0;
  int bin = 0;
  for (int b = bins - 1; b >= 0; --b) {
    if (above + ws->hist[b] >= s.need) {
      bin = b;
      break;
    }
    above += ws->hist[b];
  }
  s.need -= above;
  s.prefix =
      level == 0 ? static_cast<uint32_t>(bin) : (s.prefix << 10) | static_cast<uint32_t>(bin);
  for (int b = 0; b < 2048; ++b) ws->hist[b] = 0;
  if (level == 2) {
    s.threshold = s.prefix;
    s.take_equal = s.need;
    s.count = 0;
    s.ties = 0;
    reinterpret_cast<uint32_t*>(payload)[0] = k;
  }
}

__global__ void TopKCollectKernel(float* r, uint8_t* payload, size_t n, size_t k,
                                  TopKWorkspace* ws) {
  uint32_t* indices = reinterpret_cast<uint32_t*>(payload + 4);
  float* values = reinterpret_cast<float*>(payload + 4 + 4 * k);
  TopKState& s = ws->state;
  const uint32_t threshold = s.threshold;
  GRID_STRIDE(i, n) {
    const uint32_t key = Key(r[i]);
    bool take = key > threshold;
    if (key == threshold) take = atomicAdd(&s.ties, 1u) < s.take_equal;
    if (take) {
      const uint32_t slot = atomicAdd(&s.count, 1u);
      indices[slot] = static_cast<uint32_t>(i);
      values[slot] = r[i];
      r[i] = 0.0f;
    }
  }
}

__global__ void TopKDecodeAddKernel(const uint8_t* payload, float* out, size_t n, size_t k) {
  const uint32_t count = reinterpret_cast<const uint32_t*>(payload)[0];
  const uint32_t* indices = reinterpret_cast<const uint32_t*>(payload + 4);
  const float* values = reinterpret_cast<const float*>(payload + 4 + 4 * k);
  const size_t m = count < k ? count : k;
  GRID_STRIDE(j, m) {
    if (indices[j] < n) out[indices[j]] = __fadd_rn(out[indices[j]], values[j]);  // distinct
  }
}

// ---- efsign ----

__global__ void AddAndSumAbsKernel(const float* g, float* r, size_t n, double* sum) {
  __shared__ float partial[kThreads];
  float local = 0.0f;
  GRID_STRIDE(i, n) {
    const float v = __fadd_rn(r[i], g[i]);
    r[i] = v;
    local += fabsf(v);
  }
  partial[threadIdx.x] = local;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(sum, static_cast<double>(partial[0]));
}

// Each warp packs 32 consecutive elements into one little-endian word: bit j = element 32w + j,
// which is the CPU's LSB-first byte layout.
__global__ void SignPackKernel(float* r, uint8_t* payload, size_t n, const double* sum) {
  const float scale = n == 0 ? 0.0f : static_cast<float>(*sum / static_cast<double>(n));
  if (blockIdx.x == 0 && threadIdx.x == 0) reinterpret_cast<float*>(payload)[0] = scale;
  const size_t bit_bytes = (n + 7) / 8;
  const size_t words = (n + 31) / 32;
  const size_t warps_total = static_cast<size_t>(gridDim.x) * blockDim.x / 32;
  const unsigned lane = threadIdx.x % 32;
  for (size_t w = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32; w < words;
       w += warps_total) {
    const size_t i = w * 32 + lane;
    bool negative = false;
    if (i < n) {
      const float v = r[i];
      negative = signbit(v);
      r[i] = __fsub_rn(v, copysignf(scale, v));
    }
    const uint32_t word = __ballot_sync(0xffffffffu, negative);
    if (lane == 0) {
      uint8_t* dst = payload + 4 + 4 * w;
      if (4 * w + 4 <= bit_bytes) {
        *reinterpret_cast<uint32_t*>(dst) = word;
      } else {
        for (size_t b = 0; 4 * w + b < bit_bytes; ++b)
          dst[b] = static_cast<uint8_t>(word >> (8 * b));
      }
    }
  }
}

__global__ void SignUnpackAddKernel(const uint8_t* payload, float* out, size_t n) {
  const float scale = reinterpret_cast<const float*>(payload)[0];
  const uint8_t* bits = payload + 4;
  GRID_STRIDE(i, n) {
    out[i] = __fadd_rn(out[i], ((bits[i / 8] >> (i % 8)) & 1u) ? -scale : scale);
  }
}

}  // namespace

cudaError_t ErrorFeedbackToHalf(const float* grad, float* residual, uint16_t* out, size_t n,
                                cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  EfHalfKernel<<<Blocks(n), kThreads, 0, stream>>>(grad, residual, out, n);
  return cudaGetLastError();
}

cudaError_t ErrorFeedbackToBFloat16(const float* grad, float* residual, uint16_t* out, size_t n,
                                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  EfBFloat16Kernel<<<Blocks(n), kThreads, 0, stream>>>(grad, residual, out, n);
  return cudaGetLastError();
}

cudaError_t HalfToFloat(const uint16_t* in, float* out, size_t n, bool accumulate,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  HalfToFloatKernel<<<Blocks(n), kThreads, 0, stream>>>(in, out, n, accumulate);
  return cudaGetLastError();
}

cudaError_t BFloat16ToFloat(const uint16_t* in, float* out, size_t n, bool accumulate,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  BFloat16ToFloatKernel<<<Blocks(n), kThreads, 0, stream>>>(in, out, n, accumulate);
  return cudaGetLastError();
}

cudaError_t CovapCompress(const float* grad, float* residual, float* payload, size_t n,
                          size_t shard, int interval, int64_t step, float alpha,
                          cudaStream_t stream) {
  if (n == 0 || shard == 0 || interval < 1) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  CovapCompressKernel<<<Blocks(n), kThreads, 0, stream>>>(grad, residual, payload, n, shard,
                                                          interval, step % interval, alpha);
  return cudaGetLastError();
}

cudaError_t CovapDecode(const float* payload, float* out, size_t n, size_t shard, int interval,
                        int64_t step, bool accumulate, cudaStream_t stream) {
  if (n == 0 || shard == 0 || interval < 1) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  CovapDecodeKernel<<<Blocks(n), kThreads, 0, stream>>>(payload, out, n, shard, interval,
                                                        step % interval, accumulate);
  return cudaGetLastError();
}

size_t TopKWorkspaceBytes() { return sizeof(TopKWorkspace); }

cudaError_t TopKCompress(const float* grad, float* residual, uint8_t* payload, size_t n, size_t k,
                         void* workspace, cudaStream_t stream) {
  if (k == 0 || k > n || n > 0xffffffffu) return cudaErrorInvalidValue;
  auto* ws = static_cast<TopKWorkspace*>(workspace);
  TopKInitKernel<<<1, kThreads, 0, stream>>>(ws, static_cast<uint32_t>(k));
  for (int level = 0; level < 3; ++level) {
    TopKHistogramKernel<<<Blocks(n), kThreads, 0, stream>>>(grad, residual, n, ws, level);
    TopKPickBinKernel<<<1, 1, 0, stream>>>(ws, level, payload, static_cast<uint32_t>(k));
  }
  TopKCollectKernel<<<Blocks(n), kThreads, 0, stream>>>(residual, payload, n, k, ws);
  return cudaGetLastError();
}

cudaError_t TopKDecodeAdd(const uint8_t* payload, float* out, size_t n, size_t k,
                          cudaStream_t stream) {
  if (k == 0) return cudaSuccess;
  TopKDecodeAddKernel<<<Blocks(k), kThreads, 0, stream>>>(payload, out, n, k);
  return cudaGetLastError();
}

size_t EfSignWorkspaceBytes() { return sizeof(double); }

cudaError_t EfSignCompress(const float* grad, float* residual, uint8_t* payload, size_t n,
                           void* workspace, cudaStream_t stream) {
  auto* sum = static_cast<double*>(workspace);
  cudaError_t err = cudaMemsetAsync(sum, 0, sizeof(double), stream);
  if (err != cudaSuccess) return err;
  AddAndSumAbsKernel<<<Blocks(n), kThreads, 0, stream>>>(grad, residual, n, sum);
  SignPackKernel<<<Blocks((n + 31) / 32 * 32), kThreads, 0, stream>>>(residual, payload, n, sum);
  return cudaGetLastError();
}

cudaError_t EfSignDecodeAdd(const uint8_t* payload, float* out, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SignUnpackAddKernel<<<Blocks(n), kThreads, 0, stream>>>(payload, out, n);
  return cudaGetLastError();
}

}  // namespace cuda_raw
}  // namespace compress
}  // namespace overlap
