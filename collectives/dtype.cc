#include "collectives/dtype.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace overlap {

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
    case DataType::kInt8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return "uint8";
    case DataType::kInt8:
      return "int8";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kAdasum:
      return "adasum";
  }
  return "unknown";
}

bool IsFloatingPoint(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

absl::Status ValidateDataType(DataType dtype) {
  if (DataTypeSize(dtype) != 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype ", static_cast<int32_t>(dtype),
                   " (expected uint8, int8, int32, int64, float16, bfloat16, float32 or float64)"));
}

absl::Status ValidateReduceOp(ReduceOp op) {
  if (std::string(ReduceOpName(op)) != "unknown") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reduce op ", static_cast<int32_t>(op),
                   " (expected sum, average, min, max, product or adasum)"));
}

absl::Status AdasumSupports(int ranks, DataType dtype) {
  if (ranks < 1 || (ranks & (ranks - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Adasum needs a power-of-two number of ranks, and this job has ", ranks));
  }
  if (!IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Adasum is defined for floating-point tensors (float16, bfloat16, float32, "
                     "float64), not ",
                     DataTypeName(dtype)));
  }
  return absl::OkStatus();
}

absl::Status ParseDataType(absl::string_view name, DataType* out) {
  struct Alias {
    const char* name;
    DataType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"uint8", DataType::kUint8},     {"u8", DataType::kUint8},
      {"int8", DataType::kInt8},       {"i8", DataType::kInt8},
      {"int32", DataType::kInt32},     {"i32", DataType::kInt32},
      {"int64", DataType::kInt64},     {"i64", DataType::kInt64},
      {"float16", DataType::kFloat16}, {"fp16", DataType::kFloat16},
      {"half", DataType::kFloat16},    {"bfloat16", DataType::kBFloat16},
      {"bf16", DataType::kBFloat16},   {"float32", DataType::kFloat32},
      {"fp32", DataType::kFloat32},    {"float", DataType::kFloat32},
      {"float64", DataType::kFloat64}, {"fp64", DataType::kFloat64},
      {"double", DataType::kFloat64},
  };
  for (const Alias& alias : kAliases) {
    if (name == alias.name) {
      *out = alias.dtype;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype name '", name, "'"));
}

}  // namespace overlap
