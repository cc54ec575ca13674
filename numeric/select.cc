// Magnitude scans for top-k: the candidate collection pass runs 8 lanes at a time and only
// leaves the vector loop for the (rare, ~k/n) lanes that pass the threshold.
#include <immintrin.h>

#include "numeric/cpu_kernels.h"

namespace overlap {
namespace numeric {
namespace {

#define OVERLAP_AVX2 __attribute__((target("avx2,fma,f16c")))

inline uint64_t Candidate(float x, size_t i) {
  return static_cast<uint64_t>(MagnitudeKey(x)) << 32 | static_cast<uint32_t>(i);
}

void CollectScalar(const float* x, size_t begin, size_t n, uint32_t min_key,
                   std::vector<uint64_t>& out) {
  for (size_t i = begin; i < n; ++i) {
    if (MagnitudeKey(x[i]) >= min_key) out.push_back(Candidate(x[i], i));
  }
}

OVERLAP_AVX2 void CollectAvx2(const float* x, size_t n, uint32_t min_key,
                              std::vector<uint64_t>& out) {
  if (min_key == 0) return CollectScalar(x, 0, n, 0, out);  // the signed compare needs >= 1
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i below = _mm256_set1_epi32(static_cast<int32_t>(min_key - 1));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_mask);
    const __m256i b =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8)), abs_mask);
    // Keys are < 2^31, so the signed compare orders them correctly.
    const int mask_a = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, below)));
    const int mask_b = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(b, below)));
    unsigned mask = static_cast<unsigned>(mask_a) | (static_cast<unsigned>(mask_b) << 8);
    while (mask != 0) {
      const size_t j = i + __builtin_ctz(mask);
      out.push_back(Candidate(x[j], j));
      mask &= mask - 1;
    }
  }
  CollectScalar(x, i, n, min_key, out);
}

void AddCollectScalar(const float* g, float* r, size_t begin, size_t n, uint32_t min_key,
                      std::vector<uint64_t>& out) {
  for (size_t i = begin; i < n; ++i) {
    r[i] += g[i];
    if (MagnitudeKey(r[i]) >= min_key) out.push_back(Candidate(r[i], i));
  }
}

OVERLAP_AVX2 void AddCollectAvx2(const float* g, float* r, size_t n, uint32_t min_key,
                                 std::vector<uint64_t>& out) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  // min_key == 0 selects everything; the signed compare against min_key - 1 = -1 does too.
  const __m256i below = _mm256_set1_epi32(static_cast<int32_t>(min_key) - 1);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_add_ps(_mm256_loadu_ps(r + i), _mm256_loadu_ps(g + i));
    const __m256 b = _mm256_add_ps(_mm256_loadu_ps(r + i + 8), _mm256_loadu_ps(g + i + 8));
    _mm256_storeu_ps(r + i, a);
    _mm256_storeu_ps(r + i + 8, b);
    const __m256i ka = _mm256_and_si256(_mm256_castps_si256(a), abs_mask);
    const __m256i kb = _mm256_and_si256(_mm256_castps_si256(b), abs_mask);
    const __m256i pass =
        _mm256_packs_epi32(_mm256_cmpgt_epi32(ka, below), _mm256_cmpgt_epi32(kb, below));
    if (_mm256_testz_si256(pass, pass)) continue;  // the common case: nothing passes
    unsigned mask = static_cast<unsigned>(
                        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(ka, below)))) |
                    (static_cast<unsigned>(
                         _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(kb, below))))
                     << 8);
    while (mask != 0) {
      const size_t j = i + __builtin_ctz(mask);
      out.push_back(Candidate(r[j], j));
      mask &= mask - 1;
    }
  }
  AddCollectScalar(g, r, i, n, min_key, out);
}

}  // namespace

void AddAndCollectAtLeast(absl::Span<const float> grad, absl::Span<float> acc, uint32_t min_key,
                          std::vector<uint64_t>& out, Isa isa) {
  if (isa == Isa::kAvx2) return AddCollectAvx2(grad.data(), acc.data(), grad.size(), min_key, out);
  AddCollectScalar(grad.data(), acc.data(), 0, grad.size(), min_key, out);
}

void CollectAtLeast(absl::Span<const float> x, uint32_t min_key, std::vector<uint64_t>& out,
                    Isa isa) {
  if (isa == Isa::kAvx2) return CollectAvx2(x.data(), x.size(), min_key, out);
  CollectScalar(x.data(), 0, x.size(), min_key, out);
}

void MagnitudeHistogram(absl::Span<const float> x, absl::Span<uint32_t> hist) {
  // Four sub-histograms break the store-to-load dependency when neighbours share a bin.
  std::vector<uint32_t> sub(4 * 2048, 0);
  size_t i = 0;
  for (; i + 4 <= x.size(); i += 4) {
    ++sub[0 * 2048 + (MagnitudeKey(x[i]) >> 20)];
    ++sub[1 * 2048 + (MagnitudeKey(x[i + 1]) >> 20)];
    ++sub[2 * 2048 + (MagnitudeKey(x[i + 2]) >> 20)];
    ++sub[3 * 2048 + (MagnitudeKey(x[i + 3]) >> 20)];
  }
  for (; i < x.size(); ++i) ++sub[MagnitudeKey(x[i]) >> 20];
  for (size_t b = 0; b < 2048; ++b) {
    hist[b] += sub[b] + sub[2048 + b] + sub[4096 + b] + sub[6144 + b];
  }
}

}  // namespace numeric
}  // namespace overlap
