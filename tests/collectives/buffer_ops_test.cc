// CpuBufferOps: the values of a batched copy for every dtype (scaled, divided, zeroed, in place),
// the checks Copy makes, allocation, host transfers and fences. CreateBufferOps' answer for a
// CUDA device is checked where no GPU is usable (tests/gpu/cuda_buffer_ops_test.cc covers the
// rest).
#include "collectives/buffer_ops.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "numeric/half.h"

namespace overlap {
namespace {

constexpr DataType kAllTypes[] = {
    DataType::kUint8,   DataType::kInt8,     DataType::kInt32,   DataType::kInt64,
    DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
};

// One element as x86 scaling computes it, written out independently of scaling.cc.
void ExpectedElement(DataType dtype, const uint8_t* in, uint8_t* out, CopyScaling scaling) {
  const float f = static_cast<float>(scaling.factor);
  switch (dtype) {
    case DataType::kUint8:
      *out = static_cast<uint8_t>(*in / scaling.divisor);
      return;
    case DataType::kInt8: {
      int8_t v;
      std::memcpy(&v, in, 1);
      v = static_cast<int8_t>(v / scaling.divisor);
      std::memcpy(out, &v, 1);
      return;
    }
    case DataType::kInt32: {
      int32_t v;
      std::memcpy(&v, in, 4);
      v = static_cast<int32_t>(v / scaling.divisor);
      std::memcpy(out, &v, 4);
      return;
    }
    case DataType::kInt64: {
      int64_t v;
      std::memcpy(&v, in, 8);
      v /= scaling.divisor;
      std::memcpy(out, &v, 8);
      return;
    }
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, in, 2);
      if (scaling.factor != 1.0) {
        h = dtype == DataType::kFloat16 ? FloatToHalf(HalfToFloat(h) * f)
                                        : FloatToBFloat16(BFloat16ToFloat(h) * f);
      }
      std::memcpy(out, &h, 2);
      return;
    }
    case DataType::kFloat32: {
      float v;
      std::memcpy(&v, in, 4);
      if (scaling.factor != 1.0) v *= f;
      std::memcpy(out, &v, 4);
      return;
    }
    case DataType::kFloat64: {
      double v;
      std::memcpy(&v, in, 8);
      if (scaling.factor != 1.0) v *= scaling.factor;
      std::memcpy(out, &v, 8);
      return;
    }
  }
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(gen());
  return bytes;
}

// Random values that are numbers (no NaN), so == compares them.
std::vector<uint8_t> RandomValues(DataType dtype, int64_t count, uint32_t seed) {
  const size_t size = DataTypeSize(dtype);
  std::vector<uint8_t> bytes = RandomBytes(count * size, seed);
  std::mt19937 gen(seed + 1);
  std::uniform_real_distribution<double> value(-1000.0, 1000.0);
  for (int64_t i = 0; i < count; ++i) {
    uint8_t* p = bytes.data() + i * size;
    const double v = value(gen);
    if (dtype == DataType::kFloat16) {
      const uint16_t h = FloatToHalf(static_cast<float>(v));
      std::memcpy(p, &h, 2);
    } else if (dtype == DataType::kBFloat16) {
      const uint16_t h = FloatToBFloat16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
    } else if (dtype == DataType::kFloat32) {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
    } else if (dtype == DataType::kFloat64) {
      std::memcpy(p, &v, 8);
    }
  }
  return bytes;
}

TEST_CASE("CPU batched copy scales, divides and zeroes every dtype", "[buffer_ops]") {
  std::unique_ptr<BufferOps> ops = CreateCpuBufferOps();
  for (DataType dtype : kAllTypes) {
    const bool floating = IsFloatingPoint(dtype);
    for (const CopyScaling scaling :
         floating ? std::vector<CopyScaling>{{1.0, 1}, {0.25, 1}, {-1.0 / 3, 1}}
                  : std::vector<CopyScaling>{{1.0, 1}, {1.0, 2}, {1.0, 7}}) {
      INFO(DataTypeName(dtype) << " factor " << scaling.factor << " divisor " << scaling.divisor);
      const size_t size = DataTypeSize(dtype);
      // Slices: a copy, zeros, an empty slice with null pointers, and one in place.
      const int64_t counts[] = {1001, 37, 0, 513};
      const std::vector<uint8_t> src = RandomValues(dtype, counts[0], 1);
      const std::vector<uint8_t> in_place = RandomValues(dtype, counts[3], 2);
      std::vector<uint8_t> a(counts[0] * size, 0xee), zeros(counts[1] * size, 0xee), b = in_place;
      const CopySlice slices[] = {
          {a.data(), src.data(), counts[0]},
          {zeros.data(), nullptr, counts[1]},
          {nullptr, nullptr, counts[2]},
          {b.data(), b.data(), counts[3]},
      };
      REQUIRE(ops->Copy(slices, dtype, scaling).ok());
      std::vector<uint8_t> want(size);
      for (int64_t i = 0; i < counts[0]; ++i) {
        ExpectedElement(dtype, src.data() + i * size, want.data(), scaling);
        REQUIRE(std::memcmp(a.data() + i * size, want.data(), size) == 0);
      }
      REQUIRE(zeros == std::vector<uint8_t>(zeros.size(), 0));
      for (int64_t i = 0; i < counts[3]; ++i) {
        ExpectedElement(dtype, in_place.data() + i * size, want.data(), scaling);
        REQUIRE(std::memcmp(b.data() + i * size, want.data(), size) == 0);
      }
    }
  }
}

TEST_CASE("CPU batched copy: known values", "[buffer_ops]") {
  std::unique_ptr<BufferOps> ops = CreateCpuBufferOps();
  const int32_t ints[] = {7, -7, 8, std::numeric_limits<int32_t>::min()};
  int32_t int_out[4];
  REQUIRE(ops->Copy({{int_out, ints, 4}}, DataType::kInt32, {1.0, 2}).ok());
  CHECK(int_out[0] == 3);
  CHECK(int_out[1] == -3);  // toward zero
  CHECK(int_out[2] == 4);
  CHECK(int_out[3] == std::numeric_limits<int32_t>::min() / 2);

  const uint16_t halves[] = {FloatToHalf(1.0f), FloatToHalf(3.0f), FloatToHalf(65504.0f)};
  uint16_t half_out[3];
  REQUIRE(ops->Copy({{half_out, halves, 3}}, DataType::kFloat16, {0.25, 1}).ok());
  CHECK(HalfToFloat(half_out[0]) == 0.25f);
  CHECK(HalfToFloat(half_out[1]) == 0.75f);
  CHECK(HalfToFloat(half_out[2]) == 16376.0f);
  REQUIRE(ops->Copy({{half_out, halves, 3}}, DataType::kFloat16, {4.0, 1}).ok());
  CHECK(half_out[2] == 0x7c00u);  // overflows to infinity

  const float floats[] = {1.0f, -0.0f, std::numeric_limits<float>::infinity()};
  float float_out[3];
  REQUIRE(ops->Copy({{float_out, floats, 3}}, DataType::kFloat32, {0.5, 1}).ok());
  CHECK(float_out[0] == 0.5f);
  CHECK(std::signbit(float_out[1]));
  CHECK(std::isinf(float_out[2]));
  REQUIRE(ops->Copy({{float_out, floats, 3}}, DataType::kFloat32, {0.0, 1}).ok());
  CHECK(std::isnan(float_out[2]));  // inf * 0
}

TEST_CASE("CPU batched copy refuses what it cannot do, naming the slice", "[buffer_ops]") {
  std::unique_ptr<BufferOps> ops = CreateCpuBufferOps();
  alignas(16) float f[8] = {};
  alignas(16) int32_t i[8] = {};
  const auto refused = [&](absl::Span<const CopySlice> slices, DataType dtype, CopyScaling scaling,
                           const char* words) {
    const absl::Status s = ops->Copy(slices, dtype, scaling);
    INFO(s.ToString());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.message().find(words) != absl::string_view::npos);
    CHECK(s.message().find("cpu") != absl::string_view::npos);
  };
  refused({{f, f, 4}, {f + 4, f, -1}}, DataType::kFloat32, {}, "slice 1 of 2 has count -1");
  refused({{nullptr, f, 4}}, DataType::kFloat32, {}, "null dst");
  refused({{reinterpret_cast<char*>(f) + 2, f, 1}}, DataType::kFloat32, {}, "not aligned");
  refused({{i, i, 4}}, DataType::kInt32, {0.5, 1}, "integers can only be divided");
  refused({{f, f, 4}}, DataType::kFloat32, {1.0, 2}, "divisor is 2");
  refused({{i, i, 4}}, DataType::kInt32, {1.0, 0}, "divisor is 0");
  refused({{f, f, 4}}, static_cast<DataType>(42), {}, "unknown dtype 42");
  // Nothing to copy is not an error, whatever the pointers.
  CHECK(ops->Copy({}, DataType::kFloat32, {}).ok());
  CHECK(ops->Copy({{nullptr, nullptr, 0}}, DataType::kFloat32, {}).ok());
}

TEST_CASE("CPU accumulate adds scaled values as ScaledAdd does, and refuses other dtypes",
          "[buffer_ops]") {
  std::unique_ptr<BufferOps> ops = CreateCpuBufferOps();
  std::vector<float> dst = {1.0f, 2.0f, -3.0f}, src = {0.5f, 0.25f, 4.0f};
  REQUIRE(ops->Accumulate(dst.data(), src.data(), 3, DataType::kFloat32, 2.0).ok());
  CHECK(dst == std::vector<float>{2.0f, 2.5f, 5.0f});
  std::vector<double> d = {1.0}, s = {0.1};
  REQUIRE(ops->Accumulate(d.data(), s.data(), 1, DataType::kFloat64, 1.0).ok());
  CHECK(d[0] == 1.0 + 0.1);
  std::vector<int32_t> i = {1};
  const absl::Status refused = ops->Accumulate(i.data(), i.data(), 1, DataType::kInt32, 1.0);
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(refused.message()).find("int32") != std::string::npos);
  CHECK(ops->Accumulate(nullptr, s.data(), 1, DataType::kFloat64, 1.0).code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("CPU allocation, host transfers and fences", "[buffer_ops]") {
  std::unique_ptr<BufferOps> ops = CreateCpuBufferOps();
  CHECK(ops->device() == Device::Cpu());
  CHECK(ops->stream() == nullptr);
  absl::StatusOr<std::unique_ptr<DeviceMemory>> a = ops->Allocate(1000);
  REQUIRE(a.ok());
  CHECK((*a)->size() == 1000);
  CHECK(reinterpret_cast<uintptr_t>((*a)->data()) % 64 == 0);
  absl::StatusOr<std::unique_ptr<DeviceMemory>> h = ops->AllocateHost(1000);
  REQUIRE(h.ok());
  const std::vector<uint8_t> bytes = RandomBytes(1000, 3);
  REQUIRE(ops->CopyFromHost((*a)->data(), bytes.data(), 1000).ok());
  REQUIRE(ops->CopyToHost((*h)->data(), (*a)->data(), 1000).ok());
  CHECK(std::memcmp((*h)->data(), bytes.data(), 1000) == 0);
  CHECK(ops->WaitForStream(nullptr).ok());
  absl::StatusOr<std::unique_ptr<Work>> fence = ops->Fence();
  REQUIRE(fence.ok());
  absl::StatusOr<bool> done = (*fence)->Test();
  REQUIRE(done.ok());
  CHECK(*done);
  CHECK(ops->Allocate(0).ok());

  const size_t absurd = size_t{1} << 62;
  absl::StatusOr<std::unique_ptr<DeviceMemory>> big = ops->Allocate(absurd);
  REQUIRE(!big.ok());
  CHECK(big.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(big.status().message().find(std::to_string(absurd)) != absl::string_view::npos);
}

TEST_CASE("CreateBufferOps: the CPU always, CUDA devices only where usable", "[buffer_ops]") {
  absl::StatusOr<std::unique_ptr<BufferOps>> cpu = CreateBufferOps(Device::Cpu(), nullptr);
  REQUIRE(cpu.ok());
  CHECK((*cpu)->device() == Device::Cpu());
  const std::string reason = CudaUnavailableReason();
  CHECK((CudaDeviceCount() == 0) == !reason.empty());
  if (CudaDeviceCount() == 0) {
    absl::StatusOr<std::unique_ptr<BufferOps>> gpu = CreateBufferOps(Device::Cuda(0), nullptr);
    REQUIRE(!gpu.ok());
    CHECK(gpu.status().code() == absl::StatusCode::kUnavailable);
    CHECK(gpu.status().message().find("cuda:0") != absl::string_view::npos);
    CHECK(gpu.status().message().find(reason) != absl::string_view::npos);
  }
  absl::StatusOr<std::unique_ptr<BufferOps>> missing = CreateBufferOps(Device::Cuda(4096), nullptr);
  REQUIRE(!missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kUnavailable);
  CHECK(missing.status().message().find("cuda:4096") != absl::string_view::npos);
}

}  // namespace
}  // namespace overlap
