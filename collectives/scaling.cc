#include "collectives/scaling.h"

#include <algorithm>
#include <cstring>

#include "numeric/half.h"

namespace overlap {
namespace {

template <typename T>
void ScaleTyped(void* dst, const void* src, int64_t count, double factor) {
  auto* d = static_cast<T*>(dst);
  const auto* s = static_cast<const T*>(src);
  const T f = static_cast<T>(factor);
  for (int64_t i = 0; i < count; ++i) d[i] = s[i] * f;
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ScaleHalf(void* dst, const void* src, int64_t count, double factor) {
  auto* d = static_cast<uint16_t*>(dst);
  const auto* s = static_cast<const uint16_t*>(src);
  const float f = static_cast<float>(factor);
  for (int64_t i = 0; i < count; ++i) d[i] = FromFloat(ToFloat(s[i]) * f);
}

template <typename T>
void AddTyped(void* dst, const void* src, int64_t count, double factor) {
  auto* d = static_cast<T*>(dst);
  const auto* s = static_cast<const T*>(src);
  const T f = static_cast<T>(factor);
  if (factor == 1.0) {
    for (int64_t i = 0; i < count; ++i) d[i] += s[i];
  } else {
    for (int64_t i = 0; i < count; ++i) d[i] += s[i] * f;
  }
}

template <typename T>
void DivideTyped(void* data, int64_t count, int64_t divisor) {
  auto* d = static_cast<T*>(data);
  for (int64_t i = 0; i < count; ++i) d[i] = static_cast<T>(d[i] / divisor);
}

}  // namespace

void ScaledCopy(void* dst, const void* src, int64_t count, DataType dtype, double factor) {
  if (factor == 1.0 || !IsFloatingPoint(dtype)) {
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(count) * DataTypeSize(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kFloat32:
      return ScaleTyped<float>(dst, src, count, factor);
    case DataType::kFloat64:
      return ScaleTyped<double>(dst, src, count, factor);
    case DataType::kFloat16:
      return ScaleHalf<HalfToFloat, FloatToHalf>(dst, src, count, factor);
    case DataType::kBFloat16:
      return ScaleHalf<BFloat16ToFloat, FloatToBFloat16>(dst, src, count, factor);
    default:
      return;
  }
}

void ScaledAdd(void* dst, const void* src, int64_t count, DataType dtype, double factor) {
  if (dtype == DataType::kFloat64) {
    AddTyped<double>(dst, src, count, factor);
  } else if (dtype == DataType::kFloat32) {
    AddTyped<float>(dst, src, count, factor);
  }
}

void DivideIntegers(void* data, int64_t count, DataType dtype, int64_t divisor) {
  switch (dtype) {
    case DataType::kUint8:
      return DivideTyped<uint8_t>(data, count, divisor);
    case DataType::kInt8:
      return DivideTyped<int8_t>(data, count, divisor);
    case DataType::kInt32:
      return DivideTyped<int32_t>(data, count, divisor);
    case DataType::kInt64:
      return DivideTyped<int64_t>(data, count, divisor);
    default:
      return;
  }
}

void FinishReduced(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op,
                   double postscale, int size) {
  const bool average = op == ReduceOp::kAverage;
  const bool floating = IsFloatingPoint(dtype);
  ScaledCopy(dst, src, count, dtype, postscale * (average && floating ? 1.0 / size : 1.0));
  if (average && !floating) DivideIntegers(dst, count, dtype, size);
}

void InPieces(uint8_t* dst, const uint8_t* src, int64_t count, size_t elem_bytes,
              const PieceFn& work, const std::function<void()>& between) {
  const int64_t piece =
      std::max<int64_t>(1, kPieceBytes / static_cast<int64_t>(std::max<size_t>(1, elem_bytes)));
  for (int64_t offset = 0; offset < count; offset += piece) {
    if (offset > 0 && between) between();
    const size_t skip = static_cast<size_t>(offset) * elem_bytes;
    work(dst + skip, src + skip, std::min(piece, count - offset));
  }
}

}  // namespace overlap
