// fp16 / bf16 conversion kernels. The scalar loops call numeric/half.h directly; the AVX2
// loops reproduce it bit for bit (tests/compression/cast_kernels_test.cc sweeps both).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "numeric/half.h"
#include "numeric/cpu_kernels.h"

namespace overlap {
namespace numeric {
namespace {

constexpr float kHalfMax = 65504.0f;
const float kBFloat16Max = BitsToFloat(0x7f7f0000u);  // largest finite bfloat16

// ---- scalar reference semantics, one element ----

inline uint16_t EfHalfOne(float g, float& r) {
  const float v = g + r;
  if (!std::isfinite(v)) {
    r = 0.0f;
    return overlap::FloatToHalf(v);
  }
  const uint16_t h = overlap::FloatToHalf(std::min(std::max(v, -kHalfMax), kHalfMax));
  r = v - overlap::HalfToFloat(h);
  return h;
}

inline uint16_t EfBFloat16One(float g, float& r) {
  const float v = g + r;
  if (!std::isfinite(v)) {
    r = 0.0f;
    return overlap::FloatToBFloat16(v);
  }
  const uint16_t h = overlap::FloatToBFloat16(std::min(std::max(v, -kBFloat16Max), kBFloat16Max));
  r = v - overlap::BFloat16ToFloat(h);
  return h;
}

inline uint16_t HalfSumOne(uint16_t a, uint16_t b) {
  return overlap::FloatToHalf(overlap::HalfToFloat(a) + overlap::HalfToFloat(b));
}

inline uint16_t BFloat16SumOne(uint16_t a, uint16_t b) {
  return overlap::FloatToBFloat16(overlap::BFloat16ToFloat(a) + overlap::BFloat16ToFloat(b));
}

// ---- AVX2 building blocks ----

#define OVERLAP_AVX2 __attribute__((target("avx2,fma,f16c")))

// NaN lanes become a quiet NaN with the lane's sign, which both hardware conversion and half.h
// map to sign | 0x7e00 (fp16) or sign | 0x7fc0 (bf16).
OVERLAP_AVX2 inline __m256 CanonicalNan(__m256 v) {
  const __m256 nan = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)),
                                  _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
  return _mm256_blendv_ps(v, nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

OVERLAP_AVX2 inline __m128i ToHalf8(__m256 v) {
  return _mm256_cvtps_ph(CanonicalNan(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// Hardware sets the quiet bit of a signalling NaN; half.h keeps the payload as is. Rebuild NaN
// lanes with integer ops so all 65536 inputs match.
OVERLAP_AVX2 inline __m256 FromHalf8(__m128i h) {
  const __m256i x = _mm256_cvtepu16_epi32(h);
  const __m256i magnitude = _mm256_and_si256(x, _mm256_set1_epi32(0x7fff));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7c00));
  const __m256i nan_bits = _mm256_or_si256(
      _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x8000)), 16),
                      _mm256_set1_epi32(0x7f800000)),
      _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x3ff)), 13));
  return _mm256_blendv_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(nan_bits),
                          _mm256_castsi256_ps(is_nan));
}

// Round-to-nearest-even bf16 of each lane, as 32-bit lanes holding the 16-bit result.
OVERLAP_AVX2 inline __m256i ToBFloat16Wide(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

// Packs eight 32-bit lanes holding 16-bit values into 16-bit lanes, in order.
OVERLAP_AVX2 inline __m128i Narrow(__m256i wide) {
  const __m256i packed = _mm256_packus_epi32(wide, wide);  // lanes: a0-3 a0-3 | a4-7 a4-7
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

OVERLAP_AVX2 inline __m256 FromBFloat16(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

OVERLAP_AVX2 inline __m128i Load8(const uint16_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
OVERLAP_AVX2 inline void Store8(uint16_t* p, __m128i v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
}

// Lanes where v is finite, as an all-ones mask; false for inf and NaN.
OVERLAP_AVX2 inline __m256 FiniteMask(__m256 v) {
  return _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v), _mm256_set1_ps(INFINITY),
                       _CMP_LT_OQ);
}

OVERLAP_AVX2 inline __m256 Saturate(__m256 v, __m256 finite, float max) {
  const __m256 clamped = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-max)), _mm256_set1_ps(max));
  return _mm256_blendv_ps(v, clamped, finite);
}

OVERLAP_AVX2 void FloatToHalfAvx2(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) Store8(out + i, ToHalf8(_mm256_loadu_ps(in + i)));
  for (; i < n; ++i) out[i] = overlap::FloatToHalf(in[i]);
}

OVERLAP_AVX2 void HalfToFloatAvx2(const uint16_t* in, float* out, size_t n, bool add) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = FromHalf8(Load8(in + i));
    if (add) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
    _mm256_storeu_ps(out + i, v);
  }
  for (; i < n; ++i)
    out[i] = add ? out[i] + overlap::HalfToFloat(in[i]) : overlap::HalfToFloat(in[i]);
}

OVERLAP_AVX2 void FloatToBFloat16Avx2(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i packed =
        _mm256_permute4x64_epi64(_mm256_packus_epi32(ToBFloat16Wide(_mm256_loadu_ps(in + i)),
                                                     ToBFloat16Wide(_mm256_loadu_ps(in + i + 8))),
                                 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  for (; i + 8 <= n; i += 8) Store8(out + i, Narrow(ToBFloat16Wide(_mm256_loadu_ps(in + i))));
  for (; i < n; ++i) out[i] = overlap::FloatToBFloat16(in[i]);
}

OVERLAP_AVX2 void BFloat16ToFloatAvx2(const uint16_t* in, float* out, size_t n, bool add) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = FromBFloat16(Load8(in + i));
    if (add) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
    _mm256_storeu_ps(out + i, v);
  }
  for (; i < n; ++i)
    out[i] = add ? out[i] + overlap::BFloat16ToFloat(in[i]) : overlap::BFloat16ToFloat(in[i]);
}

// Error-feedback casts, 8 lanes at a time. Non-finite lanes are rare, so the common block takes
// a short path (clamp, convert, subtract) and only a block holding inf or NaN takes the careful
// one, which matches the scalar semantics lane by lane.
// Payloads at least this large bypass the cache (non-temporal stores): they are read next by the
// network, not by this core, and skipping the read-for-ownership of each payload line saves an
// eighth of the memory traffic on tensors that do not fit in cache anyway.
constexpr size_t kStreamingElements = size_t{1} << 21;

template <bool kStream>
OVERLAP_AVX2 inline void EfHalfBlock(const float* g, float* r, uint16_t* out) {
  const __m256 v = _mm256_add_ps(_mm256_loadu_ps(g), _mm256_loadu_ps(r));
  const __m256 finite = FiniteMask(v);
  __m128i h;
  __m256 residual;
  if (_mm256_movemask_ps(finite) == 0xff) {
    h = _mm256_cvtps_ph(
        _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-kHalfMax)), _mm256_set1_ps(kHalfMax)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    residual = _mm256_sub_ps(v, _mm256_cvtph_ps(h));
  } else {
    h = ToHalf8(Saturate(v, finite, kHalfMax));
    residual = _mm256_and_ps(_mm256_sub_ps(v, _mm256_cvtph_ps(h)), finite);
  }
  _mm256_storeu_ps(r, residual);
  if (kStream) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), h);
  } else {
    Store8(out, h);
  }
}

OVERLAP_AVX2 void EfHalfAvx2(const float* g, float* r, uint16_t* out, size_t n) {
  size_t i = 0;
  if (n >= kStreamingElements && reinterpret_cast<uintptr_t>(out) % 2 == 0) {
    // Scalar head until the payload is 16-byte aligned, as streaming stores require.
    for (; reinterpret_cast<uintptr_t>(out + i) % 16 != 0; ++i) out[i] = EfHalfOne(g[i], r[i]);
    for (; i + 16 <= n; i += 16) {
      EfHalfBlock<true>(g + i, r + i, out + i);
      EfHalfBlock<true>(g + i + 8, r + i + 8, out + i + 8);
    }
    _mm_sfence();  // order the streaming stores before whoever reads the payload next
  }
  for (; i + 16 <= n; i += 16) {
    EfHalfBlock<false>(g + i, r + i, out + i);
    EfHalfBlock<false>(g + i + 8, r + i + 8, out + i + 8);
  }
  for (; i + 8 <= n; i += 8) EfHalfBlock<false>(g + i, r + i, out + i);
  for (; i < n; ++i) out[i] = EfHalfOne(g[i], r[i]);
}

OVERLAP_AVX2 inline __m256i EfBFloat16Block(const float* g, float* r) {
  const __m256 v = _mm256_add_ps(_mm256_loadu_ps(g), _mm256_loadu_ps(r));
  const __m256 finite = FiniteMask(v);
  __m256i wide;
  __m256 residual;
  if (_mm256_movemask_ps(finite) == 0xff) {
    const __m256 clamped = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-kBFloat16Max)),
                                         _mm256_set1_ps(kBFloat16Max));
    const __m256i u = _mm256_castps_si256(clamped);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    wide = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb),
                             16);
    residual = _mm256_sub_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  } else {
    wide = ToBFloat16Wide(Saturate(v, finite, kBFloat16Max));
    residual =
        _mm256_and_ps(_mm256_sub_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16))), finite);
  }
  _mm256_storeu_ps(r, residual);
  return wide;
}

// Packs two blocks of 8 bf16 results (32-bit lanes) into 16 ordered 16-bit lanes: packus
// interleaves the 128-bit halves, the permute restores the order.
OVERLAP_AVX2 inline __m256i Narrow16(__m256i a, __m256i b) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
}

OVERLAP_AVX2 void EfBFloat16Avx2(const float* g, float* r, uint16_t* out, size_t n) {
  size_t i = 0;
  if (n >= kStreamingElements && reinterpret_cast<uintptr_t>(out) % 2 == 0) {
    // Scalar head until the payload is 32-byte aligned, as streaming stores require.
    for (; reinterpret_cast<uintptr_t>(out + i) % 32 != 0; ++i) out[i] = EfBFloat16One(g[i], r[i]);
    for (; i + 16 <= n; i += 16) {
      const __m256i a = EfBFloat16Block(g + i, r + i);
      const __m256i b = EfBFloat16Block(g + i + 8, r + i + 8);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i), Narrow16(a, b));
    }
    _mm_sfence();  // order the streaming stores before whoever reads the payload next
  }
  for (; i + 16 <= n; i += 16) {
    const __m256i a = EfBFloat16Block(g + i, r + i);
    const __m256i b = EfBFloat16Block(g + i + 8, r + i + 8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), Narrow16(a, b));
  }
  for (; i + 8 <= n; i += 8) Store8(out + i, Narrow(EfBFloat16Block(g + i, r + i)));
  for (; i < n; ++i) out[i] = EfBFloat16One(g[i], r[i]);
}

OVERLAP_AVX2 void HalfSumAvx2(const uint16_t* in, uint16_t* inout, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Store8(inout + i,
           ToHalf8(_mm256_add_ps(FromHalf8(Load8(in + i)), FromHalf8(Load8(inout + i)))));
  }
  for (; i < n; ++i) inout[i] = HalfSumOne(in[i], inout[i]);
}

OVERLAP_AVX2 void BFloat16SumAvx2(const uint16_t* in, uint16_t* inout, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 sum = _mm256_add_ps(FromBFloat16(Load8(in + i)), FromBFloat16(Load8(inout + i)));
    Store8(inout + i, Narrow(ToBFloat16Wide(sum)));
  }
  for (; i < n; ++i) inout[i] = BFloat16SumOne(in[i], inout[i]);
}

}  // namespace

void HalfSum(absl::Span<const uint16_t> in, absl::Span<uint16_t> inout, Isa isa) {
  if (isa == Isa::kAvx2) return HalfSumAvx2(in.data(), inout.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) inout[i] = HalfSumOne(in[i], inout[i]);
}

void BFloat16Sum(absl::Span<const uint16_t> in, absl::Span<uint16_t> inout, Isa isa) {
  if (isa == Isa::kAvx2) return BFloat16SumAvx2(in.data(), inout.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) inout[i] = BFloat16SumOne(in[i], inout[i]);
}

void FloatToHalf(absl::Span<const float> in, absl::Span<uint16_t> out, Isa isa) {
  if (isa == Isa::kAvx2) return FloatToHalfAvx2(in.data(), out.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = overlap::FloatToHalf(in[i]);
}

void HalfToFloat(absl::Span<const uint16_t> in, absl::Span<float> out, Isa isa) {
  if (isa == Isa::kAvx2) return HalfToFloatAvx2(in.data(), out.data(), in.size(), false);
  for (size_t i = 0; i < in.size(); ++i) out[i] = overlap::HalfToFloat(in[i]);
}

void HalfToFloatAdd(absl::Span<const uint16_t> in, absl::Span<float> out, Isa isa) {
  if (isa == Isa::kAvx2) return HalfToFloatAvx2(in.data(), out.data(), in.size(), true);
  for (size_t i = 0; i < in.size(); ++i) out[i] += overlap::HalfToFloat(in[i]);
}

void FloatToBFloat16(absl::Span<const float> in, absl::Span<uint16_t> out, Isa isa) {
  if (isa == Isa::kAvx2) return FloatToBFloat16Avx2(in.data(), out.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = overlap::FloatToBFloat16(in[i]);
}

void BFloat16ToFloat(absl::Span<const uint16_t> in, absl::Span<float> out, Isa isa) {
  if (isa == Isa::kAvx2) return BFloat16ToFloatAvx2(in.data(), out.data(), in.size(), false);
  for (size_t i = 0; i < in.size(); ++i) out[i] = overlap::BFloat16ToFloat(in[i]);
}

void BFloat16ToFloatAdd(absl::Span<const uint16_t> in, absl::Span<float> out, Isa isa) {
  if (isa == Isa::kAvx2) return BFloat16ToFloatAvx2(in.data(), out.data(), in.size(), true);
  for (size_t i = 0; i < in.size(); ++i) out[i] += overlap::BFloat16ToFloat(in[i]);
}

void ErrorFeedbackToHalf(absl::Span<const float> grad, absl::Span<float> residual,
                         absl::Span<uint16_t> out, Isa isa) {
  if (isa == Isa::kAvx2) return EfHalfAvx2(grad.data(), residual.data(), out.data(), grad.size());
  for (size_t i = 0; i < grad.size(); ++i) out[i] = EfHalfOne(grad[i], residual[i]);
}

void ErrorFeedbackToBFloat16(absl::Span<const float> grad, absl::Span<float> residual,
                             absl::Span<uint16_t> out, Isa isa) {
  if (isa == Isa::kAvx2) {
    return EfBFloat16Avx2(grad.data(), residual.data(), out.data(), grad.size());
  }
  for (size_t i = 0; i < grad.size(); ++i) out[i] = EfBFloat16One(grad[i], residual[i]);
}

}  // namespace numeric
}  // namespace overlap
