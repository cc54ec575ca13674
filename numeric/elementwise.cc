// Element-wise kernels. The simple loops are written once as always-inline templates and
// instantiated twice: at baseline (SSE2, auto-vectorised under -O3) and inside an AVX2 function,
// where GCC inlines them and vectorises 8 wide. Reductions and bit packing use intrinsics
// because the compiler may not reorder float sums on its own.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "numeric/cpu_kernels.h"

namespace overlap {
namespace numeric {
namespace {

#define OVERLAP_INLINE __attribute__((always_inline)) inline
#define OVERLAP_AVX2 __attribute__((target("avx2,fma,f16c")))

OVERLAP_INLINE void AddLoop(const float* __restrict in, float* __restrict acc, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += in[i];
}

OVERLAP_INLINE void SendLoop(const float* __restrict g, float* __restrict r, float alpha,
                             float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float t = alpha * r[i];
    out[i] = g[i] + t;
    r[i] = r[i] - t;
  }
}

OVERLAP_AVX2 void AddAvx2(const float* in, float* acc, size_t n) { AddLoop(in, acc, n); }

// Outputs at least this large bypass the cache: the payload is read next by the network, and
// streaming stores skip the read-for-ownership of every payload line.
constexpr size_t kStreamingElements = size_t{1} << 21;

OVERLAP_AVX2 void SendAvx2(const float* g, float* r, float alpha, float* out, size_t n) {
  if (n < kStreamingElements || reinterpret_cast<uintptr_t>(out) % 4 != 0) {
    return SendLoop(g, r, alpha, out, n);
  }
  size_t head = 0;
  while (reinterpret_cast<uintptr_t>(out + head) % 32 != 0) ++head;
  SendLoop(g, r, alpha, out, head);
  const __m256 a = _mm256_set1_ps(alpha);
  size_t i = head;
  for (; i + 8 <= n; i += 8) {
    const __m256 rv = _mm256_loadu_ps(r + i);
    const __m256 t = _mm256_mul_ps(a, rv);
    _mm256_stream_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(g + i), t));
    _mm256_storeu_ps(r + i, _mm256_sub_ps(rv, t));
  }
  _mm_sfence();  // order the streaming stores before whoever reads the payload next
  SendLoop(g + i, r + i, alpha, out + i, n - i);
}

// Float partial sums over blocks this long are flushed into a double, bounding the error.
constexpr size_t kSumBlock = 4096;

double AddAndSumAbsScalar(const float* g, float* r, size_t n) {
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    r[i] += g[i];
    total += std::fabs(r[i]);
  }
  return total;
}

OVERLAP_AVX2 double AddAndSumAbsAvx2(const float* g, float* r, size_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  double total = 0.0;
  size_t i = 0;
  while (i + 8 <= n) {
    const size_t end = std::min(n - (n - i) % 8, i + kSumBlock);
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (; i + 16 <= end; i += 16) {
      const __m256 a = _mm256_add_ps(_mm256_loadu_ps(r + i), _mm256_loadu_ps(g + i));
      const __m256 b = _mm256_add_ps(_mm256_loadu_ps(r + i + 8), _mm256_loadu_ps(g + i + 8));
      _mm256_storeu_ps(r + i, a);
      _mm256_storeu_ps(r + i + 8, b);
      s0 = _mm256_add_ps(s0, _mm256_and_ps(a, abs_mask));
      s1 = _mm256_add_ps(s1, _mm256_and_ps(b, abs_mask));
    }
    for (; i + 8 <= end; i += 8) {
      const __m256 a = _mm256_add_ps(_mm256_loadu_ps(r + i), _mm256_loadu_ps(g + i));
      _mm256_storeu_ps(r + i, a);
      s0 = _mm256_add_ps(s0, _mm256_and_ps(a, abs_mask));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_add_ps(s0, s1));
    for (float lane : lanes) total += lane;
  }
  return total + AddAndSumAbsScalar(g + i, r + i, n - i);
}

void SignPackScalar(float* r, float scale, uint8_t* bits, size_t n) {
  for (size_t byte = 0; byte * 8 < n; ++byte) {
    uint8_t packed = 0;
    for (size_t b = 0; b < 8 && byte * 8 + b < n; ++b) {
      float& v = r[byte * 8 + b];
      if (std::signbit(v)) packed |= static_cast<uint8_t>(1u << b);
      v = v - std::copysign(scale, v);
    }
    bits[byte] = packed;
  }
}

OVERLAP_AVX2 void SignPackAvx2(float* r, float scale, uint8_t* bits, size_t n) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 magnitude = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(r + i);
    bits[i / 8] = static_cast<uint8_t>(_mm256_movemask_ps(v));
    const __m256 sent = _mm256_or_ps(magnitude, _mm256_and_ps(v, sign_mask));
    _mm256_storeu_ps(r + i, _mm256_sub_ps(v, sent));
  }
  if (i < n) SignPackScalar(r + i, scale, bits + i / 8, n - i);
}

void SignUnpackAddScalar(const uint8_t* bits, float scale, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] += ((bits[i / 8] >> (i % 8)) & 1u) ? -scale : scale;
}

OVERLAP_AVX2 void SignUnpackAddAvx2(const uint8_t* bits, float scale, float* out, size_t n) {
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 magnitude = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i set =
        _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits[i / 8]), lane_bit), lane_bit);
    const __m256 value =
        _mm256_or_ps(magnitude, _mm256_and_ps(_mm256_castsi256_ps(set), sign_mask));
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), value));
  }
  for (; i < n; ++i) out[i] += ((bits[i / 8] >> (i % 8)) & 1u) ? -scale : scale;
}

}  // namespace

void Add(absl::Span<const float> in, absl::Span<float> acc, Isa isa) {
  if (isa == Isa::kAvx2) return AddAvx2(in.data(), acc.data(), in.size());
  AddLoop(in.data(), acc.data(), in.size());
}

void SendWithResidual(absl::Span<const float> grad, absl::Span<float> residual, float alpha,
                      absl::Span<float> out, Isa isa) {
  if (isa == Isa::kAvx2)
    return SendAvx2(grad.data(), residual.data(), alpha, out.data(), grad.size());
  SendLoop(grad.data(), residual.data(), alpha, out.data(), grad.size());
}

double AddAndSumAbs(absl::Span<const float> grad, absl::Span<float> residual, Isa isa) {
  if (isa == Isa::kAvx2) return AddAndSumAbsAvx2(grad.data(), residual.data(), grad.size());
  return AddAndSumAbsScalar(grad.data(), residual.data(), grad.size());
}

void SignPack(absl::Span<float> residual, float scale, absl::Span<uint8_t> bits, Isa isa) {
  if (isa == Isa::kAvx2) return SignPackAvx2(residual.data(), scale, bits.data(), residual.size());
  SignPackScalar(residual.data(), scale, bits.data(), residual.size());
}

void SignUnpackAdd(absl::Span<const uint8_t> bits, float scale, absl::Span<float> out, Isa isa) {
  if (isa == Isa::kAvx2) return SignUnpackAddAvx2(bits.data(), scale, out.data(), out.size());
  SignUnpackAddScalar(bits.data(), scale, out.data(), out.size());
}

}  // namespace numeric
}  // namespace overlap
