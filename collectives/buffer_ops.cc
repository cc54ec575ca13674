#include "collectives/buffer_ops.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/buffer_ops_internal.h"
#include "collectives/scaling.h"

namespace overlap {
namespace {

// Host allocations are aligned for the widest vector loads (AVX-512) and whole cache lines.
constexpr size_t kHostAlignment = 64;

class HostMemory : public DeviceMemory {
 public:
  HostMemory(void* data, size_t size) : data_(data), size_(size) {}
  ~HostMemory() override { std::free(data_); }
  void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* const data_;
  const size_t size_;
};

// The Fence of work that already ran on the calling thread.
class DoneWork : public Work {
 public:
  absl::StatusOr<bool> Test() override { return true; }
};

class CpuBufferOps : public BufferOps {
 public:
  Device device() const override { return Device::Cpu(); }
  void* stream() const override { return nullptr; }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) override {
    // aligned_alloc wants a multiple of the alignment (checked for overflow first).
    if (bytes > SIZE_MAX - kHostAlignment) return Exhausted(bytes);
    const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    void* data = std::aligned_alloc(kHostAlignment, rounded == 0 ? kHostAlignment : rounded);
    if (data == nullptr) return Exhausted(bytes);
    return std::unique_ptr<DeviceMemory>(new HostMemory(data, bytes));
  }

  absl::Status WaitForStream(void*) override { return absl::OkStatus(); }

  absl::Status Copy(absl::Span<const CopySlice> slices, DataType dtype,
                    CopyScaling scaling) override {
    if (absl::Status s = ValidateCopy(device(), slices, dtype, scaling); !s.ok()) return s;
    const size_t element = DataTypeSize(dtype);
    for (const CopySlice& slice : slices) {
      if (slice.count == 0) continue;
      if (slice.src == nullptr) {
        std::memset(slice.dst, 0, static_cast<size_t>(slice.count) * element);
        continue;
      }
      ScaledCopy(slice.dst, slice.src, slice.count, dtype, scaling.factor);
      if (scaling.divisor != 1) DivideIntegers(slice.dst, slice.count, dtype, scaling.divisor);
    }
    return absl::OkStatus();
  }

  absl::Status Accumulate(void* dst, const void* src, int64_t count, DataType dtype,
                          double factor) override {
    if (absl::Status s = ValidateAccumulate(device(), dst, src, count, dtype); !s.ok()) return s;
    ScaledAdd(dst, src, count, dtype, factor);
    return absl::OkStatus();
  }

  absl::Status CopyToHost(void* host, const void* device_src, size_t bytes) override {
    if (bytes > 0) std::memcpy(host, device_src, bytes);
    return absl::OkStatus();
  }

  absl::Status CopyFromHost(void* device_dst, const void* host, size_t bytes) override {
    if (bytes > 0) std::memcpy(device_dst, host, bytes);
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> AllocateHost(size_t bytes) override {
    return Allocate(bytes);
  }

  absl::StatusOr<std::unique_ptr<Work>> Fence() override {
    return std::unique_ptr<Work>(new DoneWork());
  }

 private:
  static absl::Status Exhausted(size_t bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cpu: cannot allocate ", bytes, " bytes of host memory"));
  }
};

bool Aligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

}  // namespace

absl::Status ValidateAccumulate(Device device, const void* dst, const void* src, int64_t count,
                                DataType dtype) {
  if (dtype != DataType::kFloat32 && dtype != DataType::kFloat64) {
    return absl::InvalidArgumentError(absl::StrCat(device.ToString(), ": accumulate of ",
                                                   DataTypeName(dtype),
                                                   " (only float32 and float64 accumulate)"));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(device.ToString(), ": accumulate of a negative count (", count, ")"));
  }
  if (count > 0 && (dst == nullptr || src == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(device.ToString(), ": accumulate with a null pointer"));
  }
  return absl::OkStatus();
}

absl::Status ValidateCopy(Device device, absl::Span<const CopySlice> slices, DataType dtype,
                          CopyScaling scaling) {
  const std::string where = absl::StrCat(device.ToString(), ": batched copy");
  if (absl::Status s = ValidateDataType(dtype); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
  }
  if (IsFloatingPoint(dtype) && scaling.divisor != 1) {
    return absl::InvalidArgumentError(absl::StrCat(where, " of ", DataTypeName(dtype),
                                                   ": divisor is ", scaling.divisor,
                                                   "; floating-point values scale by factor"));
  }
  if (!IsFloatingPoint(dtype) && scaling.factor != 1.0) {
    return absl::InvalidArgumentError(absl::StrCat(where, " of ", DataTypeName(dtype),
                                                   ": factor is ", scaling.factor,
                                                   "; integers can only be divided"));
  }
  if (scaling.divisor < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": divisor is ", scaling.divisor, ", must be >= 1"));
  }
  const size_t element = DataTypeSize(dtype);
  for (size_t i = 0; i < slices.size(); ++i) {
    const CopySlice& slice = slices[i];
    const auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(where, " of ", DataTypeName(dtype), ": slice ",
                                                     i, " of ", slices.size(), " ", why));
    };
    if (slice.count < 0) return bad(absl::StrCat("has count ", slice.count));
    if (slice.count == 0) continue;
    if (slice.dst == nullptr) return bad("has a null dst");
    if (!Aligned(slice.dst, element) || !Aligned(slice.src, element)) {
      return bad(absl::StrCat("has a pointer not aligned to its ", element, "-byte elements"));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteZeros(BufferOps& ops, void* dst, int64_t count, DataType dtype) {
  const CopySlice slice{dst, nullptr, count};
  return ops.Copy({&slice, 1}, dtype, CopyScaling{});
}

std::unique_ptr<BufferOps> CreateCpuBufferOps() { return std::make_unique<CpuBufferOps>(); }

absl::StatusOr<std::unique_ptr<BufferOps>> CreateBufferOps(Device device, void* stream) {
  switch (device.kind) {
    case DeviceKind::kCpu:
      return CreateCpuBufferOps();
    case DeviceKind::kCuda:
      return CreateCudaBufferOps(device.index, stream);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device kind ", static_cast<int>(device.kind)));
}

}  // namespace overlap
