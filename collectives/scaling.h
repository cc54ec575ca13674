// Element-wise scaling and scaled copies for every dtype, used around reductions (prescale,
// postscale, average). fp16/bf16 are widened to fp32 and rounded back to nearest even.
#ifndef OVERLAP_COLLECTIVES_SCALING_H_
#define OVERLAP_COLLECTIVES_SCALING_H_

#include <cstdint>
#include <functional>

#include "collectives/dtype.h"

namespace overlap {

// dst[i] = src[i] * factor for `count` elements; dst may equal src. Integer dtypes: factor must
// be 1 (a plain copy), which callers check up front.
void ScaledCopy(void* dst, const void* src, int64_t count, DataType dtype, double factor);

// dst[i] += src[i] * factor for float32 and float64 (the only dtypes error feedback keeps).
void ScaledAdd(void* dst, const void* src, int64_t count, DataType dtype, double factor);

// Integer average: divides each element by `divisor`, rounding toward zero.
void DivideIntegers(void* data, int64_t count, DataType dtype, int64_t divisor);

// The reduction a collective runs for `op`: an average travels as a sum and is divided after.
inline ReduceOp CollectiveOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

// Turns `count` reduced elements at `src` (the collective's result for `op`) into what the caller
// asked for at `dst` (dst may equal src): times postscale and, for an average, divided by `size`
// (integers rounding toward zero).
void FinishReduced(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op,
                   double postscale, int size);

// Runs work(dst + i, src + i, n) over `count` elements of `elem_bytes` each in pieces of about
// kPieceBytes (i and n in elements, the pointers advanced by bytes), calling `between` after each
// piece but the last. For the runtime's long host copies, which run on the thread that also
// advances the collectives in flight (Executor::Poke).
inline constexpr int64_t kPieceBytes = int64_t{1} << 20;
using PieceFn = std::function<void(uint8_t* dst, const uint8_t* src, int64_t n)>;
void InPieces(uint8_t* dst, const uint8_t* src, int64_t count, size_t elem_bytes,
              const PieceFn& work, const std::function<void()>& between);

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_SCALING_H_
