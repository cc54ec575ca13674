// CUDA versions of the fp16/bf16, covap, top-k and efsign kernels. Semantics match the CPU
// kernels (numeric/cpu_kernels.h) element for element: the casts are bit-identical to
// numeric/half.h (hardware RNE for numbers, half.h's NaN encoding patched in), covap uses
// explicitly rounded multiply/add (never fused) so its residual split is the CPU's, top-k selects
// exactly the k largest magnitudes (order of the pairs may differ), efsign's bits are identical and
// its scale differs only by summation order.
//
// The element-wise kernels are bound by memory bandwidth, so a thread moves 16 bytes per array per
// access (float4, or eight halves) and the grid is one wave of resident blocks striding over the
// tensor. Grouped access needs every array 16-byte aligned at each group; the elements before the
// first such element and after the last whole group (all of them when the arrays' alignments
// disagree) go one at a time through the same per-element function, so no result depends on
// alignment or on the launch shape.
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>

#include "compression/cuda/kernels_cu.h"
#include "numeric/cuda_half.cuh"

namespace overlap {
namespace compress {
namespace cuda_raw {
namespace {

constexpr int kThreads = 256;
// The single-block steps of top-k (bin picks, the candidate select).
constexpr int kBlockThreads = 1024;

#define GRID_STRIDE(i, n)                                                              \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

// ---- launch shape ----

// Blocks of kThreads that the current device keeps resident at once (SMs x blocks per SM), asked
// once per device: more blocks than that only queue behind the first wave of a grid-stride loop.
unsigned ResidentBlocks() {
  constexpr int kCachedDevices = 64;
  constexpr unsigned kUnknown = 4096;  // a device that cannot be asked fails the launch anyway
  static std::atomic<unsigned> cached[kCachedDevices];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return kUnknown;
  const bool cacheable = device >= 0 && device < kCachedDevices;
  if (cacheable) {
    const unsigned blocks = cached[device].load(std::memory_order_relaxed);
    if (blocks != 0) return blocks;
  }
  int sms = 0;
  int threads = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerMultiProcessor, device) !=
          cudaSuccess ||
      sms < 1 || threads < kThreads) {
    return kUnknown;
  }
  const unsigned blocks = static_cast<unsigned>(sms) * static_cast<unsigned>(threads / kThreads);
  if (cacheable) cached[device].store(blocks, std::memory_order_relaxed);
  return blocks;
}

// Blocks of kThreads for `items` per-thread work items, at most one resident wave, at least one.
unsigned Blocks(size_t items) {
  const size_t wanted = (items + kThreads - 1) / kThreads;
  const unsigned cap = ResidentBlocks();
  if (wanted == 0) return 1;
  return wanted < cap ? static_cast<unsigned>(wanted) : cap;
}

__host__ __device__ inline bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Elements [head, head + width * groups) are taken `width` at a time, every array 16-byte aligned
// at each group; the rest of [0, n) one at a time.
struct VecRange {
  size_t n;
  size_t head;
  size_t groups;
};

struct ArrayRef {
  const void* data;
  size_t element_bytes;
};

// The first element below `width` at which every array is 16-byte aligned (offsets into one
// buffer share it); none, so every element goes alone, when the arrays' alignments disagree.
// width * element_bytes must be a multiple of 16 for every array, so later groups stay aligned.
VecRange Split(size_t n, size_t width, std::initializer_list<ArrayRef> arrays) {
  for (size_t head = 0; head < width && head < n; ++head) {
    bool aligned = true;
    for (const ArrayRef& a : arrays) {
      aligned = aligned && (reinterpret_cast<uintptr_t>(a.data) + head * a.element_bytes) % 16 == 0;
    }
    if (aligned) return {n, head, (n - head) / width};
  }
  return {n, 0, 0};
}

// Per-thread work items of a VecRange: one per group, one per element outside the groups.
size_t Items(const VecRange& range, size_t width) {
  return range.groups + (range.n - range.groups * width);
}

// group(i) for the first element i of every group and one(i) for every other element, spread over
// the whole grid.
template <size_t kWidth, typename Group, typename One>
__device__ __forceinline__ void ForEach(const VecRange& range, Group group, One one) {
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = t; j < range.groups; j += stride) group(range.head + j * kWidth);
  for (size_t i = t; i < range.head; i += stride) one(i);
  for (size_t i = range.head + range.groups * kWidth + t; i < range.n; i += stride) one(i);
}

__device__ __forceinline__ void Load4(const float* p, float* v) {
  const float4 q = *reinterpret_cast<const float4*>(p);
  v[0] = q.x;
  v[1] = q.y;
  v[2] = q.z;
  v[3] = q.w;
}

__device__ __forceinline__ void Store4(float* p, const float* v) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}

__device__ __forceinline__ void Load8(const float* p, float (&v)[8]) {
  Load4(p, v);
  Load4(p + 4, v + 4);
}

__device__ __forceinline__ void Store8(float* p, const float (&v)[8]) {
  Store4(p, v);
  Store4(p + 4, v + 4);
}

// Eight 16-bit values in one 16-byte access; element j is the low half of word j / 2 when j is
// even (little-endian, as the array's memory order).
__device__ __forceinline__ void Load8(const uint16_t* p, uint16_t (&h)[8]) {
  const uint4 q = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    h[2 * j] = static_cast<uint16_t>(w[j]);
    h[2 * j + 1] = static_cast<uint16_t>(w[j] >> 16);
  }
}

__device__ __forceinline__ void Store8(uint16_t* p, const uint16_t (&h)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) w[j] = h[2 * j] | (static_cast<uint32_t>(h[2 * j + 1]) << 16);
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

// ---- fp16 / bf16 ----

// Eight elements per group: 16 bytes of halves, two float4s of each float array.
constexpr size_t kCastWidth = 8;

// g + r as the CPU computes it: a GPU returns the canonical NaN 0x7fffffff whenever an operand is
// NaN, while x86 returns the NaN operand itself with its quiet bit set, and bf16 keeps those bits.
__device__ __forceinline__ float AddAsCpu(float g, float r) {
  if (isnan(g)) return __uint_as_float(__float_as_uint(g) | 0x00400000u);
  if (isnan(r)) return __uint_as_float(__float_as_uint(r) | 0x00400000u);
  return __fadd_rn(g, r);
}

using numeric::FromBFloat16;
using numeric::FromHalf;
using numeric::ToBFloat16;
using numeric::ToHalf;

// One element of an error-feedback cast: returns what is sent and leaves the new residual in r.
struct EfHalf {
  __device__ __forceinline__ uint16_t operator()(float g, float& r) const {
    const float v = AddAsCpu(g, r);
    if (!isfinite(v)) {
      r = 0.0f;
      return ToHalf(v);
    }
    const uint16_t h = ToHalf(fminf(fmaxf(v, -65504.0f), 65504.0f));
    r = __fsub_rn(v, FromHalf(h));
    return h;
  }
};

struct EfBFloat16 {
  __device__ __forceinline__ uint16_t operator()(float g, float& r) const {
    const float max = __uint_as_float(0x7f7f0000u);
    const float v = AddAsCpu(g, r);
    if (!isfinite(v)) {
      r = 0.0f;
      return ToBFloat16(v);
    }
    const uint16_t h = ToBFloat16(fminf(fmaxf(v, -max), max));
    r = __fsub_rn(v, FromBFloat16(h));
    return h;
  }
};

struct WidenHalf {
  __device__ __forceinline__ float operator()(uint16_t h) const { return FromHalf(h); }
};

struct WidenBFloat16 {
  __device__ __forceinline__ float operator()(uint16_t h) const { return FromBFloat16(h); }
};

template <typename Cast>
__global__ void __launch_bounds__(kThreads)
    ErrorFeedbackKernel(const float* g, float* r, uint16_t* out, VecRange range) {
  const Cast cast;
  ForEach<kCastWidth>(
      range,
      [&](size_t i) {
        float gv[8];
        float rv[8];
        uint16_t h[8];
        Load8(g + i, gv);
        Load8(r + i, rv);
#pragma unroll
        for (int j = 0; j < 8; ++j) h[j] = cast(gv[j], rv[j]);
        Store8(out + i, h);
        Store8(r + i, rv);
      },
      [&](size_t i) {
        float ri = r[i];
        out[i] = cast(g[i], ri);
        r[i] = ri;
      });
}

template <typename Widen>
__global__ void __launch_bounds__(kThreads)
    WidenKernel(const uint16_t* in, float* out, VecRange range, bool accumulate) {
  const Widen widen;
  ForEach<kCastWidth>(
      range,
      [&](size_t i) {
        uint16_t h[8];
        float o[8];
        Load8(in + i, h);
        if (accumulate) {
          Load8(out + i, o);
#pragma unroll
          for (int j = 0; j < 8; ++j) o[j] = __fadd_rn(o[j], widen(h[j]));
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j) o[j] = widen(h[j]);
        }
        Store8(out + i, o);
      },
      [&](size_t i) { out[i] = accumulate ? __fadd_rn(out[i], widen(in[i])) : widen(in[i]); });
}

// ---- covap ----

constexpr size_t kCovapWidth = 4;

// Covap's shard schedule as integers a thread steps through without dividing (64-bit division is
// a long software sequence on a GPU, and once per element it was the kernel's bottleneck). Element
// i sits at `pos` in shard g = rounds * R + in_round; shard g goes this step when in_round ==
// first, and its elements land after the rounds + (in_round > first) sent shards before it (sent
// shards are packed in order; only the last shard can be short).
struct CovapPlan {
  size_t shard;
  size_t interval;  // R
  size_t first;     // the first shard sent this step: shards first, first + R, ... go
  // One grid stride of elements in the same terms, before carries.
  size_t stride_rounds;
  size_t stride_in_round;
  size_t stride_pos;
};

struct CovapCursor {
  size_t rounds;
  size_t in_round;
  size_t pos;
};

// `stride` is the number of elements one grid stride moves a thread on.
CovapPlan MakeCovapPlan(size_t shard, int interval, int64_t step, size_t stride) {
  const int64_t phase = step % interval;  // in (-R, R): step may be negative
  // Shard g goes when (g % R + phase) % R == 0, that is when g % R == (-phase) mod R.
  const size_t first = static_cast<size_t>((interval - phase) % interval);
  const size_t r = static_cast<size_t>(interval);
  const size_t shards = stride / shard;
  return {shard, r, first, shards / r, shards % r, stride % shard};
}

__host__ __device__ inline CovapCursor CovapAt(size_t i, const CovapPlan& p) {
  const size_t g = i / p.shard;
  return {g / p.interval, g % p.interval, i - g * p.shard};
}

__host__ __device__ inline bool CovapSent(const CovapCursor& c, const CovapPlan& p) {
  return c.in_round == p.first;
}

__host__ __device__ inline size_t CovapOffset(const CovapCursor& c, const CovapPlan& p) {
  return (c.rounds + (c.in_round > p.first ? 1 : 0)) * p.shard + c.pos;
}

// One element on.
__host__ __device__ inline void CovapNext(CovapCursor& c, const CovapPlan& p) {
  if (++c.pos < p.shard) return;
  c.pos = 0;
  if (++c.in_round < p.interval) return;
  c.in_round = 0;
  ++c.rounds;
}

// One grid stride on: each part is below its modulus, so one carry each.
__host__ __device__ inline void CovapStride(CovapCursor& c, const CovapPlan& p) {
  c.pos += p.stride_pos;
  size_t carry = 0;
  if (c.pos >= p.shard) {
    c.pos -= p.shard;
    carry = 1;
  }
  c.in_round += p.stride_in_round + carry;
  if (c.in_round >= p.interval) {
    c.in_round -= p.interval;
    ++c.rounds;
  }
  c.rounds += p.stride_rounds;
}

// One element of the compress step: a sent element leaves t = alpha * r (rounded) in r's place and
// sends g + t; a kept one accumulates g. Never fused.
__device__ __forceinline__ void CovapOne(bool sent, float g, float& r, float& sent_value,
                                         float alpha) {
  if (sent) {
    const float t = __fmul_rn(alpha, r);
    sent_value = __fadd_rn(g, t);
    r = __fsub_rn(r, t);
  } else {
    r = __fadd_rn(r, g);
  }
}

// kWholeGroups: the shard is a multiple of 4, groups start at multiples of 4 and the payload is
// 16-byte aligned, so a group never straddles shards and its payload slots are one aligned float4.
template <bool kWholeGroups>
__global__ void __launch_bounds__(kThreads)
    CovapCompressKernel(const float* g, float* r, float* payload, VecRange range, CovapPlan plan,
                        float alpha) {
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  if (t < range.groups) {
    CovapCursor c = CovapAt(range.head + t * kCovapWidth, plan);
    for (size_t j = t; j < range.groups; j += stride) {
      const size_t i = range.head + j * kCovapWidth;
      float gv[4];
      float rv[4];
      float pv[4];
      Load4(g + i, gv);
      Load4(r + i, rv);
      if (kWholeGroups) {
        const bool sent = CovapSent(c, plan);
#pragma unroll
        for (int e = 0; e < 4; ++e) CovapOne(sent, gv[e], rv[e], pv[e], alpha);
        if (sent) Store4(payload + CovapOffset(c, plan), pv);
      } else {
        CovapCursor at = c;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (e > 0) CovapNext(at, plan);
          const bool sent = CovapSent(at, plan);
          CovapOne(sent, gv[e], rv[e], pv[e], alpha);
          if (sent) payload[CovapOffset(at, plan)] = pv[e];
        }
      }
      Store4(r + i, rv);
      CovapStride(c, plan);
    }
  }
  const auto one = [&](size_t i) {
    const CovapCursor at = CovapAt(i, plan);
    const bool sent = CovapSent(at, plan);
    float ri = r[i];
    float sent_value;
    CovapOne(sent, g[i], ri, sent_value, alpha);
    if (sent) payload[CovapOffset(at, plan)] = sent_value;
    r[i] = ri;
  };
  for (size_t i = t; i < range.head; i += stride) one(i);
  for (size_t i = range.head + range.groups * kCovapWidth + t; i < range.n; i += stride) one(i);
}

template <bool kWholeGroups>
__global__ void __launch_bounds__(kThreads)
    CovapDecodeKernel(const float* payload, float* out, VecRange range, CovapPlan plan,
                      bool accumulate) {
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  if (t < range.groups) {
    CovapCursor c = CovapAt(range.head + t * kCovapWidth, plan);
    for (size_t j = t; j < range.groups; j += stride) {
      const size_t i = range.head + j * kCovapWidth;
      float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (kWholeGroups) {
        if (CovapSent(c, plan)) Load4(payload + CovapOffset(c, plan), v);
      } else {
        CovapCursor at = c;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (e > 0) CovapNext(at, plan);
          if (CovapSent(at, plan)) v[e] = payload[CovapOffset(at, plan)];
        }
      }
      if (accumulate) {
        float o[4];
        Load4(out + i, o);
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = __fadd_rn(o[e], v[e]);
      }
      Store4(out + i, v);
      CovapStride(c, plan);
    }
  }
  const auto one = [&](size_t i) {
    const CovapCursor at = CovapAt(i, plan);
    const float v = CovapSent(at, plan) ? payload[CovapOffset(at, plan)] : 0.0f;
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  };
  for (size_t i = t; i < range.head; i += stride) one(i);
  for (size_t i = range.head + range.groups * kCovapWidth + t; i < range.n; i += stride) one(i);
}

// ---- block-wide helpers (every thread of the block calls them; blockDim.x a multiple of 32) ----

// Reserves `want` consecutive slots of *counter for each thread, in thread order, with one atomic
// per block: one atomic per selected element on a single counter serialises a whole grid.
// Returns the thread's first slot.
__device__ uint32_t BlockAllocate(uint32_t want, uint32_t* counter) {
  __shared__ uint32_t warp_first[32];
  __shared__ uint32_t block_first;
  const unsigned lane = threadIdx.x % 32;
  const unsigned warp = threadIdx.x / 32;
  const unsigned warps = blockDim.x / 32;
  uint32_t inclusive = want;
#pragma unroll
  for (unsigned d = 1; d < 32; d *= 2) {
    const uint32_t below = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += below;
  }
  if (lane == 31) warp_first[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const uint32_t own = lane < warps ? warp_first[lane] : 0;
    uint32_t sum = own;
#pragma unroll
    for (unsigned d = 1; d < 32; d *= 2) {
      const uint32_t below = __shfl_up_sync(0xffffffffu, sum, d);
      if (lane >= d) sum += below;
    }
    if (lane < warps) warp_first[lane] = sum - own;
    if (lane == 31) block_first = sum == 0 ? 0 : atomicAdd(counter, sum);
  }
  __syncthreads();
  const uint32_t first = block_first + warp_first[warp] + (inclusive - want);
  __syncthreads();  // the shared words are reused by the next call
  return first;
}

struct BinPick {
  uint32_t bin;
  uint32_t above;  // elements in the bins above `bin`
  uint32_t count;  // elements in `bin`
};

// The bin a walk down from the top bin stops at: the highest b whose count together with the bins
// above reaches `need` (need >= 1). Bin 0 with everything above it if the bins hold fewer than
// `need`, as the walk would end. The block shares the work: each thread sums a run of bins, a
// suffix sum over the threads finds the one run that holds the answer, and that thread walks it.
__device__ BinPick PickBin(const uint32_t* hist, int bins, uint32_t need) {
  __shared__ uint32_t warp_above[32];
  __shared__ BinPick picked;
  const unsigned lane = threadIdx.x % 32;
  const unsigned warp = threadIdx.x / 32;
  const unsigned warps = blockDim.x / 32;
  const int per = (bins + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
  const int lo = min(bins, static_cast<int>(threadIdx.x) * per);
  const int hi = min(bins, lo + per);
  uint32_t run = 0;
  for (int b = lo; b < hi; ++b) run += hist[b];
  uint32_t inclusive = run;  // this run and the higher runs of the warp
#pragma unroll
  for (unsigned d = 1; d < 32; d *= 2) {
    const uint32_t higher = __shfl_down_sync(0xffffffffu, inclusive, d);
    if (lane + d < 32) inclusive += higher;
  }
  if (lane == 0) warp_above[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const uint32_t own = lane < warps ? warp_above[lane] : 0;
    uint32_t sum = own;
#pragma unroll
    for (unsigned d = 1; d < 32; d *= 2) {
      const uint32_t higher = __shfl_down_sync(0xffffffffu, sum, d);
      if (lane + d < 32) sum += higher;
    }
    if (lane < warps) warp_above[lane] = sum - own;
    if (lane == 0) picked = BinPick{0, sum, hist[0]};
  }
  __syncthreads();
  uint32_t above = warp_above[warp] + (inclusive - run);
  if (above < need && need - above <= run) {
    for (int b = hi - 1; b >= lo; --b) {
      if (above + hist[b] >= need) {
        picked = BinPick{static_cast<uint32_t>(b), above, hist[b]};
        break;
      }
      above += hist[b];
    }
  }
  __syncthreads();
  const BinPick result = picked;
  __syncthreads();  // `picked` and `warp_above` are reused by the next call
  return result;
}

// ---- top-k: three-level radix select on the magnitude key (bits 30..20, 19..10, 9..0) ----
//
// Level L's pass counts, among the elements whose key agrees with the k-th largest's on the digits
// picked so far, how many fall in each bin of digit L, and a one-block pick fixes digit L. Once a
// picked bin holds at most kTopKCandidates elements, the next pass instead takes every element
// above that bin and copies the bin's elements into the workspace, and one block picks the
// remaining digits and takes its share from that copy: the same k elements, with one full pass
// over the data fewer (two when the first bin is already small). A bin that stays large (many
// equal magnitudes) takes the original way: all three counting passes, then a collecting pass.

constexpr uint32_t kTopKCandidates = 16384;

enum TopKMode : uint32_t {
  kCounting = 0,     // the next pass counts the next digit
  kCompactNext = 1,  // the next pass takes the elements above the picked bin, copies the bin's
  kCompacted = 2,    // the copy holds everything left to decide; later passes skip
};

struct TopKState {
  uint32_t prefix;         // key >> Shift(level) of the k-th largest, for the levels picked
  uint32_t need;           // how many more elements to take at or below the current prefix
  uint32_t threshold;      // the k-th largest key, once known (counting all the way)
  uint32_t take_equal;     // how many elements equal to threshold are sent
  uint32_t count;          // slots used in the payload
  uint32_t ties;           // elements equal to threshold seen so far
  uint32_t mode;           // TopKMode
  uint32_t compact_level;  // the level whose pass made the candidate copy
  uint32_t candidates;     // entries in the candidate copy
};

struct TopKWorkspace {
  uint32_t hist[2048];
  TopKState state;
  uint32_t candidate_index[kTopKCandidates];
  float candidate_value[kTopKCandidates];
};

__device__ __forceinline__ uint32_t Key(float x) { return __float_as_uint(x) & 0x7fffffffu; }

// The lowest key bit of level L's digit.
__device__ __forceinline__ int Shift(int level) { return 20 - 10 * level; }

// Passes go over the data a tile at a time, block-uniformly (so a block can share one slot
// allocation per tile): kTileVectors float4s per thread, several loads in flight each.
constexpr int kTileVectors = 4;
constexpr int kTileElements = 4 * kTileVectors;  // per thread
constexpr size_t kTile = static_cast<size_t>(kThreads) * kTileElements;

// Element e of this thread's share of the tile at `base`: neighbouring threads read neighbouring
// float4s.
__device__ __forceinline__ size_t TileIndex(size_t base, int e) {
  return base + 4 * (threadIdx.x + static_cast<size_t>(kThreads) * (e / 4)) + e % 4;
}

// This thread's elements of a tile, zero past n; whole tiles of an aligned array as float4s.
__device__ __forceinline__ void LoadTile(const float* x, size_t n, size_t base,
                                         float (&v)[kTileElements]) {
  if (base + kTile <= n && Aligned16(x)) {
#pragma unroll
    for (int j = 0; j < kTileVectors; ++j) Load4(x + TileIndex(base, 4 * j), v + 4 * j);
  } else {
#pragma unroll
    for (int e = 0; e < kTileElements; ++e) {
      const size_t i = TileIndex(base, e);
      v[e] = i < n ? x[i] : 0.0f;
    }
  }
}

__device__ __forceinline__ void StoreTile(float* x, size_t n, size_t base,
                                          const float (&v)[kTileElements]) {
  if (base + kTile <= n && Aligned16(x)) {
#pragma unroll
    for (int j = 0; j < kTileVectors; ++j) Store4(x + TileIndex(base, 4 * j), v + 4 * j);
  } else {
#pragma unroll
    for (int e = 0; e < kTileElements; ++e) {
      const size_t i = TileIndex(base, e);
      if (i < n) x[i] = v[e];
    }
  }
}

__device__ __forceinline__ uint32_t* PayloadIndices(uint8_t* payload) {
  return reinterpret_cast<uint32_t*>(payload + 4);
}

__device__ __forceinline__ float* PayloadValues(uint8_t* payload, size_t k) {
  return reinterpret_cast<float*>(payload + 4 + 4 * k);
}

// Everything stays on the stream: no host round trip between the levels.
__global__ void TopKInitKernel(TopKWorkspace* ws, uint32_t k, uint8_t* payload) {
  for (int b = threadIdx.x; b < 2048; b += blockDim.x) ws->hist[b] = 0;
  if (threadIdx.x == 0) {
    ws->state = TopKState{0, k, 0, 0, 0, 0, kCounting, 0, 0};
    reinterpret_cast<uint32_t*>(payload)[0] = k;
  }
}

// The pass after a small bin was picked (kCompactNext): elements whose key >> shift is above the
// prefix are among the k largest whatever the remaining digits are, so they go into the payload
// now; those equal to it are the candidates for the rest.
__device__ void TopKCompactPass(float* r, uint8_t* payload, size_t n, size_t k, TopKWorkspace* ws,
                                int shift) {
  TopKState& s = ws->state;
  uint32_t* indices = PayloadIndices(payload);
  float* values = PayloadValues(payload, k);
  const uint32_t prefix = s.prefix;
  const size_t tiles = (n + kTile - 1) / kTile;
  for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const size_t base = tile * kTile;
    float v[kTileElements];
    LoadTile(r, n, base, v);
    uint32_t above = 0;  // bit e: element e
    uint32_t in_bin = 0;
#pragma unroll
    for (int e = 0; e < kTileElements; ++e) {
      if (TileIndex(base, e) >= n) continue;
      const uint32_t high = Key(v[e]) >> shift;
      above |= static_cast<uint32_t>(high > prefix) << e;
      in_bin |= static_cast<uint32_t>(high == prefix) << e;
    }
    uint32_t slot = BlockAllocate(__popc(above), &s.count);
    uint32_t copy = BlockAllocate(__popc(in_bin), &s.candidates);
#pragma unroll
    for (int e = 0; e < kTileElements; ++e) {
      const size_t i = TileIndex(base, e);
      if ((above >> e) & 1u) {
        indices[slot] = static_cast<uint32_t>(i);
        values[slot] = v[e];
        r[i] = 0.0f;
        ++slot;
      }
      if ((in_bin >> e) & 1u) {
        if (copy < kTopKCandidates) {  // the picked bin's count bounds it; never false
          ws->candidate_index[copy] = static_cast<uint32_t>(i);
          ws->candidate_value[copy] = v[e];
        }
        ++copy;
      }
    }
  }
}

// Level L: counts digit L of the elements that match the prefix (level 0 also performs residual
// += grad and counts every element), or makes the candidate copy (see TopKCompactPass).
__global__ void __launch_bounds__(kThreads)
    TopKPassKernel(const float* g, float* r, uint8_t* payload, size_t n, size_t k,
                   TopKWorkspace* ws, int level) {
  __shared__ uint32_t local[2048];
  const uint32_t mode = ws->state.mode;
  if (mode == kCompacted) return;
  if (mode == kCompactNext) {
    TopKCompactPass(r, payload, n, k, ws, Shift(level - 1));
    return;
  }
  const int bins = level == 0 ? 2048 : 1024;
  for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const uint32_t prefix = ws->state.prefix;
  const int prefix_shift = level == 0 ? 31 : Shift(level - 1);
  const int shift = Shift(level);
  const size_t tiles = (n + kTile - 1) / kTile;
  for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const size_t base = tile * kTile;
    float v[kTileElements];
    LoadTile(r, n, base, v);
    if (level == 0) {
      float gv[kTileElements];
      LoadTile(g, n, base, gv);
#pragma unroll
      for (int e = 0; e < kTileElements; ++e) v[e] = __fadd_rn(v[e], gv[e]);
      StoreTile(r, n, base, v);
    }
#pragma unroll
    for (int e = 0; e < kTileElements; ++e) {
      if (TileIndex(base, e) >= n) continue;
      const uint32_t key = Key(v[e]);
      // At level 0 the prefix is empty: key >> 31 == 0 == prefix for every key.
      if ((key >> prefix_shift) == prefix) atomicAdd(&local[(key >> shift) & (bins - 1)], 1u);
    }
  }
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&ws->hist[b], local[b]);
  }
}

// One block: fixes digit L from the histogram and clears it for the next level; after a
// compacting pass only records that the copy is made.
__global__ void __launch_bounds__(kBlockThreads) TopKPickBinKernel(TopKWorkspace* ws, int level) {
  TopKState& s = ws->state;
  const uint32_t mode = s.mode;
  const uint32_t need = s.need;
  if (mode == kCompacted) return;
  if (mode == kCompactNext) {
    if (threadIdx.x == 0) {
      s.mode = kCompacted;
      s.compact_level = static_cast<uint32_t>(level);
    }
    return;
  }
  const BinPick pick = PickBin(ws->hist, level == 0 ? 2048 : 1024, need);
  if (threadIdx.x == 0) {
    s.need = need - pick.above;
    s.prefix = level == 0 ? pick.bin : (s.prefix << 10) | pick.bin;
    if (level == 2) {
      s.threshold = s.prefix;
      s.take_equal = s.need;
    } else if (pick.count <= kTopKCandidates) {
      s.mode = kCompactNext;
    }
  }
  for (int b = threadIdx.x; b < 2048; b += blockDim.x) ws->hist[b] = 0;
}

// One block, after a compacting pass: picks the remaining digits over the candidate copy exactly
// as the counting passes would over the whole tensor, then takes the candidates above the
// threshold and `need` of those equal to it.
__global__ void __launch_bounds__(kBlockThreads)
    TopKSelectCandidatesKernel(float* r, uint8_t* payload, size_t k, TopKWorkspace* ws) {
  __shared__ uint32_t hist[1024];
  TopKState& s = ws->state;
  if (s.mode != kCompacted) return;
  const uint32_t m = min(s.candidates, kTopKCandidates);
  uint32_t prefix = s.prefix;
  uint32_t need = s.need;
  for (int level = static_cast<int>(s.compact_level); level < 3; ++level) {
    for (int b = threadIdx.x; b < 1024; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for (uint32_t c = threadIdx.x; c < m; c += blockDim.x) {
      const uint32_t key = Key(ws->candidate_value[c]);
      if ((key >> Shift(level - 1)) == prefix) atomicAdd(&hist[(key >> Shift(level)) & 0x3ffu], 1u);
    }
    __syncthreads();
    const BinPick pick = PickBin(hist, 1024, need);
    need -= pick.above;
    prefix = (prefix << 10) | pick.bin;
  }
  const uint32_t threshold = prefix;
  uint32_t* indices = PayloadIndices(payload);
  float* values = PayloadValues(payload, k);
  for (uint32_t base = 0; base < m; base += blockDim.x) {
    const uint32_t c = base + threadIdx.x;
    bool take = false;
    if (c < m) {
      const uint32_t key = Key(ws->candidate_value[c]);
      take = key > threshold;
      if (key == threshold) take = atomicAdd(&s.ties, 1u) < need;
    }
    const uint32_t slot = BlockAllocate(take ? 1u : 0u, &s.count);
    if (take) {
      const uint32_t i = ws->candidate_index[c];
      indices[slot] = i;
      values[slot] = ws->candidate_value[c];
      r[i] = 0.0f;
    }
  }
}

// After three counting passes: takes every element above the threshold and take_equal of those
// equal to it.
__global__ void __launch_bounds__(kThreads)
    TopKCollectKernel(float* r, uint8_t* payload, size_t n, size_t k, TopKWorkspace* ws) {
  TopKState& s = ws->state;
  if (s.mode != kCounting) return;
  uint32_t* indices = PayloadIndices(payload);
  float* values = PayloadValues(payload, k);
  const uint32_t threshold = s.threshold;
  const uint32_t take_equal = s.take_equal;
  const size_t tiles = (n + kTile - 1) / kTile;
  for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const size_t base = tile * kTile;
    float v[kTileElements];
    LoadTile(r, n, base, v);
    uint32_t take = 0;  // bit e: element e
#pragma unroll
    for (int e = 0; e < kTileElements; ++e) {
      if (TileIndex(base, e) >= n) continue;
      const uint32_t key = Key(v[e]);
      bool taken = key > threshold;
      if (key == threshold) taken = atomicAdd(&s.ties, 1u) < take_equal;
      take |= static_cast<uint32_t>(taken) << e;
    }
    uint32_t slot = BlockAllocate(__popc(take), &s.count);
#pragma unroll
    for (int e = 0; e < kTileElements; ++e) {
      if (((take >> e) & 1u) == 0) continue;
      const size_t i = TileIndex(base, e);
      indices[slot] = static_cast<uint32_t>(i);
      values[slot] = v[e];
      r[i] = 0.0f;
      ++slot;
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

constexpr size_t kSumWidth = 4;
constexpr size_t kUnpackWidth = 8;

// Per-thread sums are kept in double: with a one-wave grid a thread adds thousands of elements.
__global__ void __launch_bounds__(kThreads)
    AddAndSumAbsKernel(const float* g, float* r, VecRange range, double* sum) {
  __shared__ double partial[kThreads];
  double local = 0.0;
  ForEach<kSumWidth>(
      range,
      [&](size_t i) {
        float gv[4];
        float rv[4];
        Load4(g + i, gv);
        Load4(r + i, rv);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          rv[e] = __fadd_rn(rv[e], gv[e]);
          local += fabsf(rv[e]);
        }
        Store4(r + i, rv);
      },
      [&](size_t i) {
        const float v = __fadd_rn(r[i], g[i]);
        r[i] = v;
        local += fabsf(v);
      });
  partial[threadIdx.x] = local;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(sum, partial[0]);
}

// r -= sign(r) * scale, never fused; returns whether r was negative (its sign bit, NaN included).
__device__ __forceinline__ bool SignOne(float& r, float scale) {
  const bool negative = signbit(r);
  r = __fsub_rn(r, copysignf(scale, r));
  return negative;
}

// Word w of the bits is elements 32w .. 32w + 31, bit j = element 32w + j: the CPU's LSB-first
// byte layout. A word reaching past the last byte of the bits is stored bytewise.
__device__ __forceinline__ void StoreSignWord(uint8_t* bits, size_t w, uint32_t word,
                                              size_t bit_bytes) {
  uint8_t* dst = bits + 4 * w;
  if (4 * w + 4 <= bit_bytes) {
    *reinterpret_cast<uint32_t*>(dst) = word;
  } else {
    for (size_t b = 0; 4 * w + b < bit_bytes; ++b) dst[b] = static_cast<uint8_t>(word >> (8 * b));
  }
}

// `vectors`: r is 16-byte aligned, so a warp takes 128 elements a round, a float4 per lane, and
// eight lanes' four bits make a word. Otherwise a lane takes one element and a ballot the word.
__global__ void __launch_bounds__(kThreads)
    SignPackKernel(float* r, uint8_t* payload, size_t n, const double* sum, bool vectors) {
  const float scale = n == 0 ? 0.0f : static_cast<float>(*sum / static_cast<double>(n));
  if (blockIdx.x == 0 && threadIdx.x == 0) reinterpret_cast<float*>(payload)[0] = scale;
  uint8_t* bits = payload + 4;
  const size_t bit_bytes = (n + 7) / 8;
  const size_t words = (n + 31) / 32;
  const size_t warps_total = static_cast<size_t>(gridDim.x) * blockDim.x / 32;
  const size_t first_warp = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  if (!vectors) {
    for (size_t w = first_warp; w < words; w += warps_total) {
      const size_t i = w * 32 + lane;
      bool negative = false;
      if (i < n) {
        float v = r[i];
        negative = SignOne(v, scale);
        r[i] = v;
      }
      const uint32_t word = __ballot_sync(0xffffffffu, negative);
      if (lane == 0) StoreSignWord(bits, w, word, bit_bytes);
    }
    return;
  }
  const size_t rounds = (n + 127) / 128;
  for (size_t c = first_warp; c < rounds; c += warps_total) {
    const size_t i = c * 128 + 4 * lane;
    uint32_t nibble = 0;  // bit e: element i + e
    if (i + 4 <= n) {
      float v[4];
      Load4(r + i, v);
#pragma unroll
      for (int e = 0; e < 4; ++e) nibble |= static_cast<uint32_t>(SignOne(v[e], scale)) << e;
      Store4(r + i, v);
    } else {
      for (int e = 0; e < 4; ++e) {
        if (i + e >= n) break;
        float v = r[i + e];
        nibble |= static_cast<uint32_t>(SignOne(v, scale)) << e;
        r[i + e] = v;
      }
    }
    // Element i + e is bit 4 * (lane % 8) + e of word 4c + lane / 8.
    uint32_t word = nibble << (4 * (lane % 8));
    word |= __shfl_xor_sync(0xffffffffu, word, 1);
    word |= __shfl_xor_sync(0xffffffffu, word, 2);
    word |= __shfl_xor_sync(0xffffffffu, word, 4);
    const size_t w = c * 4 + lane / 8;
    if (lane % 8 == 0 && w < words) StoreSignWord(bits, w, word, bit_bytes);
  }
}

__device__ __forceinline__ float SignValue(const uint8_t* bits, size_t i, float scale) {
  return ((bits[i / 8] >> (i % 8)) & 1u) ? -scale : scale;
}

__global__ void __launch_bounds__(kThreads)
    SignUnpackAddKernel(const uint8_t* payload, float* out, VecRange range) {
  const float scale = reinterpret_cast<const float*>(payload)[0];
  const uint8_t* bits = payload + 4;
  ForEach<kUnpackWidth>(
      range,
      [&](size_t i) {
        float o[8];
        Load8(out + i, o);
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = __fadd_rn(o[e], SignValue(bits, i + e, scale));
        Store8(out + i, o);
      },
      [&](size_t i) { out[i] = __fadd_rn(out[i], SignValue(bits, i, scale)); });
}

}  // namespace

cudaError_t ErrorFeedbackToHalf(const float* grad, float* residual, uint16_t* out, size_t n,
                                cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const VecRange range = Split(n, kCastWidth, {{grad, 4}, {residual, 4}, {out, 2}});
  ErrorFeedbackKernel<EfHalf>
      <<<Blocks(Items(range, kCastWidth)), kThreads, 0, stream>>>(grad, residual, out, range);
  return cudaGetLastError();
}

cudaError_t ErrorFeedbackToBFloat16(const float* grad, float* residual, uint16_t* out, size_t n,
                                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const VecRange range = Split(n, kCastWidth, {{grad, 4}, {residual, 4}, {out, 2}});
  ErrorFeedbackKernel<EfBFloat16>
      <<<Blocks(Items(range, kCastWidth)), kThreads, 0, stream>>>(grad, residual, out, range);
  return cudaGetLastError();
}

cudaError_t HalfToFloat(const uint16_t* in, float* out, size_t n, bool accumulate,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const VecRange range = Split(n, kCastWidth, {{in, 2}, {out, 4}});
  WidenKernel<WidenHalf>
      <<<Blocks(Items(range, kCastWidth)), kThreads, 0, stream>>>(in, out, range, accumulate);
  return cudaGetLastError();
}

cudaError_t BFloat16ToFloat(const uint16_t* in, float* out, size_t n, bool accumulate,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const VecRange range = Split(n, kCastWidth, {{in, 2}, {out, 4}});
  WidenKernel<WidenBFloat16>
      <<<Blocks(Items(range, kCastWidth)), kThreads, 0, stream>>>(in, out, range, accumulate);
  return cudaGetLastError();
}

cudaError_t CovapCompress(const float* grad, float* residual, float* payload, size_t n,
                          size_t shard, int interval, int64_t step, float alpha,
                          cudaStream_t stream) {
  if (n == 0 || shard == 0 || interval < 1) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  const VecRange range = Split(n, kCovapWidth, {{grad, 4}, {residual, 4}});
  const unsigned blocks = Blocks(Items(range, kCovapWidth));
  const CovapPlan plan =
      MakeCovapPlan(shard, interval, step, static_cast<size_t>(blocks) * kThreads * kCovapWidth);
  if (range.head == 0 && shard % kCovapWidth == 0 && Aligned16(payload)) {
    CovapCompressKernel<true>
        <<<blocks, kThreads, 0, stream>>>(grad, residual, payload, range, plan, alpha);
  } else {
    CovapCompressKernel<false>
        <<<blocks, kThreads, 0, stream>>>(grad, residual, payload, range, plan, alpha);
  }
  return cudaGetLastError();
}

cudaError_t CovapDecode(const float* payload, float* out, size_t n, size_t shard, int interval,
                        int64_t step, bool accumulate, cudaStream_t stream) {
  if (n == 0 || shard == 0 || interval < 1) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  const VecRange range = Split(n, kCovapWidth, {{out, 4}});
  const unsigned blocks = Blocks(Items(range, kCovapWidth));
  const CovapPlan plan =
      MakeCovapPlan(shard, interval, step, static_cast<size_t>(blocks) * kThreads * kCovapWidth);
  if (range.head == 0 && shard % kCovapWidth == 0 && Aligned16(payload)) {
    CovapDecodeKernel<true><<<blocks, kThreads, 0, stream>>>(payload, out, range, plan, accumulate);
  } else {
    CovapDecodeKernel<false>
        <<<blocks, kThreads, 0, stream>>>(payload, out, range, plan, accumulate);
  }
  return cudaGetLastError();
}

size_t TopKWorkspaceBytes() { return sizeof(TopKWorkspace); }

cudaError_t TopKCompress(const float* grad, float* residual, uint8_t* payload, size_t n, size_t k,
                         void* workspace, cudaStream_t stream) {
  if (k == 0 || k > n || n > 0xffffffffu) return cudaErrorInvalidValue;
  auto* ws = static_cast<TopKWorkspace*>(workspace);
  const unsigned blocks = Blocks((n + kTile - 1) / kTile * kThreads);  // at most a tile each
  TopKInitKernel<<<1, kThreads, 0, stream>>>(ws, static_cast<uint32_t>(k), payload);
  for (int level = 0; level < 3; ++level) {
    TopKPassKernel<<<blocks, kThreads, 0, stream>>>(grad, residual, payload, n, k, ws, level);
    TopKPickBinKernel<<<1, kBlockThreads, 0, stream>>>(ws, level);
  }
  TopKSelectCandidatesKernel<<<1, kBlockThreads, 0, stream>>>(residual, payload, k, ws);
  TopKCollectKernel<<<blocks, kThreads, 0, stream>>>(residual, payload, n, k, ws);
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
  const VecRange range = Split(n, kSumWidth, {{grad, 4}, {residual, 4}});
  AddAndSumAbsKernel<<<Blocks(Items(range, kSumWidth)), kThreads, 0, stream>>>(grad, residual,
                                                                               range, sum);
  const bool vectors = Aligned16(residual);
  const size_t lanes = vectors ? (n + 127) / 128 * 32 : (n + 31) / 32 * 32;
  SignPackKernel<<<Blocks(lanes), kThreads, 0, stream>>>(residual, payload, n, sum, vectors);
  return cudaGetLastError();
}

cudaError_t EfSignDecodeAdd(const uint8_t* payload, float* out, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const VecRange range = Split(n, kUnpackWidth, {{out, 4}});
  SignUnpackAddKernel<<<Blocks(Items(range, kUnpackWidth)), kThreads, 0, stream>>>(payload, out,
                                                                                   range);
  return cudaGetLastError();
}

}  // namespace cuda_raw
}  // namespace compress
}  // namespace overlap
