// Vectorised CPU kernels behind the compressors, with a scalar path for CPUs without AVX2.
//
// Every kernel takes an Isa so tests can run both paths on the same data; callers normally pass
// BestIsa(). The build uses baseline x86-64 flags, so the AVX2/F16C paths are compiled per
// function (target attribute) and chosen at run time. The cast kernels are bit-identical to the
// scalar reference conversions in numeric/half.h on both paths, NaN included (NaN is
// canonicalised to a quiet NaN with the input's sign, exactly as half.h does).
//
// Error-feedback casts: v = grad + residual is rounded to nearest even; finite values beyond the
// target's range saturate to its largest finite value, and the residual keeps v - sent: exactly
// for every unsaturated v (the rounding error of a float rounded to a narrower float is itself a
// float), and within half an ulp of v for a saturated one (|v| > 65504 in fp16). Non-finite v
// (inf, NaN) is sent as is and leaves a zero residual, so one bad step does not poison the
// residual forever. The library is built with -ffp-contract=off: fusing a multiply into a later
// add or subtract would break the exact sent + residual identities.
#ifndef OVERLAP_NUMERIC_CPU_KERNELS_H_
#define OVERLAP_NUMERIC_CPU_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace overlap {
namespace numeric {

enum class Isa { kScalar, kAvx2 };

// kAvx2 when the CPU has AVX2, FMA and F16C (checked once), else kScalar.
Isa BestIsa();
const char* IsaName(Isa isa);

// ---- casts (cast.cc); all spans of one call have equal length ----
void FloatToHalf(absl::Span<const float> in, absl::Span<uint16_t> out, Isa isa);
void HalfToFloat(absl::Span<const uint16_t> in, absl::Span<float> out, Isa isa);
void FloatToBFloat16(absl::Span<const float> in, absl::Span<uint16_t> out, Isa isa);
void BFloat16ToFloat(absl::Span<const uint16_t> in, absl::Span<float> out, Isa isa);

// out = fp16(grad + residual) saturated; residual = (grad + residual) - out (see above).
void ErrorFeedbackToHalf(absl::Span<const float> grad, absl::Span<float> residual,
                         absl::Span<uint16_t> out, Isa isa);
void ErrorFeedbackToBFloat16(absl::Span<const float> grad, absl::Span<float> residual,
                             absl::Span<uint16_t> out, Isa isa);

// out += float(in)
void HalfToFloatAdd(absl::Span<const uint16_t> in, absl::Span<float> out, Isa isa);
void BFloat16ToFloatAdd(absl::Span<const uint16_t> in, absl::Span<float> out, Isa isa);

// inout = fp16(float(in) + float(inout)), and the same in bf16: how MPI sums fp16 and bf16
// payloads (collectives/mpi_executor.cc). Both paths give half.h's bits, except that when both
// operands are NaN either one's sign may survive.
void HalfSum(absl::Span<const uint16_t> in, absl::Span<uint16_t> inout, Isa isa);
void BFloat16Sum(absl::Span<const uint16_t> in, absl::Span<uint16_t> inout, Isa isa);

// ---- element-wise (elementwise.cc) ----
// acc += in
void Add(absl::Span<const float> in, absl::Span<float> acc, Isa isa);

// The coarse filter's send of one shard: t = alpha * residual (rounded), out = grad + t,
// residual -= t. For alpha in [1/2, 1], residual - t is exact (Sterbenz), so out + residual ==
// grad + old residual up to the rounding of grad + t. alpha == 1 sends everything and zeroes the
// residual.
void SendWithResidual(absl::Span<const float> grad, absl::Span<float> residual, float alpha,
                      absl::Span<float> out, Isa isa);

// residual += grad; returns sum |residual| (after the add), accumulated in double per lane.
double AddAndSumAbs(absl::Span<const float> grad, absl::Span<float> residual, Isa isa);

// Bit i of `bits` (LSB first in each byte) = residual[i] < 0; residual[i] -= sign * scale, with
// sign = -1 for a set bit, +1 otherwise. bits.size() == ceil(n / 8); padding bits are zero.
void SignPack(absl::Span<float> residual, float scale, absl::Span<uint8_t> bits, Isa isa);

// out[i] += (bit i set ? -scale : scale)
void SignUnpackAdd(absl::Span<const uint8_t> bits, float scale, absl::Span<float> out, Isa isa);

// ---- magnitude selection (select.cc) ----
// The order key of |x|: the float's bits without the sign. Monotone in |x|; NaN sorts above inf.
inline uint32_t MagnitudeKey(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, sizeof(u));
  return u & 0x7fffffffu;
}

// Appends (in ascending i) MagnitudeKey(x[i]) << 32 | i for every i with MagnitudeKey(x[i]) >=
// min_key: candidates that sort by magnitude without touching x again.
void CollectAtLeast(absl::Span<const float> x, uint32_t min_key, std::vector<uint64_t>& out,
                    Isa isa);

// acc += grad, then CollectAtLeast(acc, ...), in one pass over memory.
void AddAndCollectAtLeast(absl::Span<const float> grad, absl::Span<float> acc, uint32_t min_key,
                          std::vector<uint64_t>& out, Isa isa);

// hist[MagnitudeKey(x[i]) >> 20] += 1 for every i; hist has 2048 bins (1/8-octave wide).
void MagnitudeHistogram(absl::Span<const float> x, absl::Span<uint32_t> hist);

}  // namespace numeric
}  // namespace overlap

#endif  // OVERLAP_NUMERIC_CPU_KERNELS_H_
