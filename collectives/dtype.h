// Element types and reduction operators shared by the runtime, the executors and the compressors.
//
// The numeric values of DataType and ReduceOp travel on the wire during negotiation, so they are
// fixed: append new values, never renumber.
#ifndef OVERLAP_COLLECTIVES_DTYPE_H_
#define OVERLAP_COLLECTIVES_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace overlap {

enum class DataType : int32_t {
  kUint8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
};

enum class ReduceOp : int32_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  // Adaptive summation (collectives/adasum.h): floating-point tensors, power-of-two rank counts.
  kAdasum = 5,
};

// Bytes per element; 0 for a value outside the enum (see ValidateDataType).
size_t DataTypeSize(DataType dtype);

// "float32", "bfloat16", ...; "unknown(<n>)" for a value outside the enum.
const char* DataTypeName(DataType dtype);
const char* ReduceOpName(ReduceOp op);

bool IsFloatingPoint(DataType dtype);

// InvalidArgument naming the bad value when `dtype` / `op` is not one of the enumerators (for
// example an integer cast from a framework's enum).
absl::Status ValidateDataType(DataType dtype);
absl::Status ValidateReduceOp(ReduceOp op);

// OK when an Adasum allreduce (collectives/adasum.h) can run over `ranks` ranks on `dtype`;
// InvalidArgument naming the cause otherwise: a rank count that is not a power of two (named),
// or a dtype that is not floating point.
absl::Status AdasumSupports(int ranks, DataType dtype);

// Parses "float32", "fp32", "f32", ... Returns InvalidArgument for anything else.
absl::Status ParseDataType(absl::string_view name, DataType* out);

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_DTYPE_H_
