// BufferOps on one CUDA device: everything queued in order on one stream, nothing waits on the
// whole device. A batched copy uploads its slice table from pinned staging memory and launches
// one kernel (copy_kernels.cu).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "collectives/buffer_ops.h"
#include "collectives/buffer_ops_internal.h"
#include "collectives/cuda/copy_kernels_cu.h"

namespace overlap {
namespace {

// Staging areas for slice tables: one is reused once the GPU has read it, so a new one is made
// only while every other upload is still queued. Past this many the oldest is waited for.
constexpr size_t kMaxStagingSlots = 16;
constexpr size_t kReservedStagingSlots = 15;
constexpr size_t kMinStagingBytes = 64 << 10;

absl::Status CudaStatus(cudaError_t err, Device device, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(device.ToString(), ": ", what, " failed: ",
                                          cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

// Makes `device` current for the guard's lifetime and gives the caller's device back after, so
// BufferOps calls never change which device the calling thread works on.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ == device) return;
    switched_ = true;
    status_ = cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (switched_ && status_ == cudaSuccess) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  cudaError_t status_ = cudaSuccess;
};

// The stream an instance queues on, shared with the memory it allocates (which is freed on it),
// so a stream the instance created outlives every allocation made on it.
class Stream {
 public:
  Stream(cudaStream_t stream, bool owned, int device)
      : stream_(stream), owned_(owned), device_(device) {}
  ~Stream() {
    if (!owned_) return;
    DeviceGuard guard(device_);
    cudaStreamDestroy(stream_);  // returns at once; the stream's work still finishes
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }

 private:
  const cudaStream_t stream_;
  const bool owned_;
  const int device_;
};

class CudaMemory : public DeviceMemory {
 public:
  enum class Kind {
    kStreamOrdered,  // cudaMallocAsync: freed after the stream's queued work
    kDevice,         // cudaMalloc, where the device has no memory pools
    kPinnedHost,     // cudaMallocHost
  };

  CudaMemory(void* data, size_t size, Kind kind, std::shared_ptr<Stream> stream, int device)
      : data_(data), size_(size), kind_(kind), stream_(std::move(stream)), device_(device) {}

  ~CudaMemory() override {
    if (data_ == nullptr) return;
    DeviceGuard guard(device_);
    if (kind_ == Kind::kStreamOrdered) {
      cudaFreeAsync(data_, stream_->get());
      return;
    }
    // The stream's queued work may still use the memory; wait for it (only at free time).
    cudaStreamSynchronize(stream_->get());
    if (kind_ == Kind::kDevice) {
      cudaFree(data_);
    } else {
      cudaFreeHost(data_);
    }
  }

  void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* const data_;
  const size_t size_;
  const Kind kind_;
  const std::shared_ptr<Stream> stream_;
  const int device_;
};

// Done once `event` (recorded on the instance's stream) has been reached.
class EventWork : public Work {
 public:
  EventWork(cudaEvent_t event, Device device) : event_(event), device_(device) {}
  ~EventWork() override { cudaEventDestroy(event_); }

  absl::StatusOr<bool> Test() override {
    const cudaError_t err = cudaEventQuery(event_);
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) return false;
    return CudaStatus(err, device_, "work queued on the buffer-operations stream");
  }

 private:
  const cudaEvent_t event_;
  const Device device_;
};

// Pinned memory a slice table is written to before its upload, and the event that says the GPU
// has read it.
struct StagingSlot {
  void* host = nullptr;
  size_t capacity = 0;
  cudaEvent_t uploaded = nullptr;
};

cuda_raw::CopyElement ElementOf(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return cuda_raw::CopyElement::kUint8;
    case DataType::kInt8:
      return cuda_raw::CopyElement::kInt8;
    case DataType::kInt32:
      return cuda_raw::CopyElement::kInt32;
    case DataType::kInt64:
      return cuda_raw::CopyElement::kInt64;
    case DataType::kFloat16:
      return cuda_raw::CopyElement::kFloat16;
    case DataType::kBFloat16:
      return cuda_raw::CopyElement::kBFloat16;
    case DataType::kFloat32:
      return cuda_raw::CopyElement::kFloat32;
    case DataType::kFloat64:
      return cuda_raw::CopyElement::kFloat64;
  }
  return cuda_raw::CopyElement::kUint8;  // unreachable: ValidateCopy refused the dtype
}

class CudaBufferOps : public BufferOps {
 public:
  CudaBufferOps(int index, std::shared_ptr<Stream> stream, bool memory_pools,
                cudaEvent_t wait_event)
      : device_(Device::Cuda(index)),
        stream_(std::move(stream)),
        memory_pools_(memory_pools),
        wait_event_(wait_event) {}

  ~CudaBufferOps() override {
    DeviceGuard guard(device_.index);
    for (StagingSlot& slot : staging_) {
      cudaEventSynchronize(slot.uploaded);  // a queued upload may still read the slot
      cudaEventDestroy(slot.uploaded);
      cudaFreeHost(slot.host);
    }
    cudaEventDestroy(wait_event_);
  }

  // Staging slots and the device table, made before any work is queued: allocating pinned
  // memory may wait for the device, which a Copy queued behind other work should not. Enough
  // slots for the data plane's pipelined buckets (runtime/planes/data_plane.h: up to 4 buckets in flight
  // of up to 3 copies each) with room to spare.
  absl::Status Reserve() {
    while (staging_.size() < kReservedStagingSlots) {
      StagingSlot slot;
      if (absl::Status s = NewStaging(kMinStagingBytes, &slot); !s.ok()) return s;
      staging_.push_back(slot);
    }
    return ReserveTable(kMinStagingBytes);
  }

  Device device() const override { return device_; }
  void* stream() const override { return stream_->get(); }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) override {
    DeviceGuard guard(device_.index);
    if (absl::Status s = CheckGuard(guard); !s.ok()) return s;
    void* data = nullptr;
    if (bytes == 0) {
      return std::unique_ptr<DeviceMemory>(
          new CudaMemory(nullptr, 0, CudaMemory::Kind::kDevice, stream_, device_.index));
    }
    const cudaError_t err =
        memory_pools_ ? cudaMallocAsync(&data, bytes, stream_->get()) : cudaMalloc(&data, bytes);
    if (err != cudaSuccess) return AllocationError(err, bytes, "device memory");
    return std::unique_ptr<DeviceMemory>(new CudaMemory(
        data, bytes, memory_pools_ ? CudaMemory::Kind::kStreamOrdered : CudaMemory::Kind::kDevice,
        stream_, device_.index));
  }

  absl::Status WaitForStream(void* stream) override {
    const cudaStream_t other =
        stream == nullptr ? cudaStreamLegacy : static_cast<cudaStream_t>(stream);
    if (other == stream_->get()) return absl::OkStatus();
    DeviceGuard guard(device_.index);
    if (absl::Status s = CheckGuard(guard); !s.ok()) return s;
    // cudaStreamWaitEvent waits for the event as recorded now, so one event serves every call.
    if (absl::Status s = CudaStatus(cudaEventRecord(wait_event_, other), device_,
                                    "cudaEventRecord on the stream to wait for");
        !s.ok()) {
      return s;
    }
    return CudaStatus(cudaStreamWaitEvent(stream_->get(), wait_event_, 0), device_,
                      "cudaStreamWaitEvent");
  }

  absl::Status Copy(absl::Span<const CopySlice> slices, DataType dtype,
                    CopyScaling scaling) override {
    if (absl::Status s = ValidateCopy(device_, slices, dtype, scaling); !s.ok()) return s;
    const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
    const int64_t rows =
        std::count_if(slices.begin(), slices.end(), [](const CopySlice& s) { return s.count > 0; });
    if (rows == 0) return absl::OkStatus();
    DeviceGuard guard(device_.index);
    if (absl::Status s = CheckGuard(guard); !s.ok()) return s;
    const size_t table_bytes = static_cast<size_t>(rows) * sizeof(cuda_raw::CopySliceRow);
    absl::StatusOr<StagingSlot*> slot = AcquireStaging(table_bytes);
    if (!slot.ok()) return slot.status();
    auto* row = static_cast<cuda_raw::CopySliceRow*>((*slot)->host);
    int64_t chunks = 0;
    for (const CopySlice& slice : slices) {
      if (slice.count == 0) continue;
      const int64_t bytes = slice.count * element;
      *row++ = {slice.dst, slice.src, bytes, chunks};
      chunks += (bytes + cuda_raw::kCopyChunkBytes - 1) / cuda_raw::kCopyChunkBytes;
    }
    if (absl::Status s = ReserveTable(table_bytes); !s.ok()) return s;
    if (absl::Status s = CudaStatus(cudaMemcpyAsync(table_->data(), (*slot)->host, table_bytes,
                                                    cudaMemcpyHostToDevice, stream_->get()),
                                    device_, "uploading the slice table");
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CudaStatus(cudaEventRecord((*slot)->uploaded, stream_->get()), device_,
                                    "cudaEventRecord after the slice-table upload");
        !s.ok()) {
      return s;
    }
    return CudaStatus(
        cuda_raw::BatchedCopy(static_cast<const cuda_raw::CopySliceRow*>(table_->data()), rows,
                              chunks, ElementOf(dtype), scaling.factor, scaling.divisor,
                              stream_->get()),
        device_,
        absl::StrCat("batched copy kernel (", rows, " slices of ", DataTypeName(dtype), ")"));
  }

  absl::Status Accumulate(void* dst, const void* src, int64_t count, DataType dtype,
                          double factor) override {
    if (absl::Status s = ValidateAccumulate(device_, dst, src, count, dtype); !s.ok()) return s;
    if (count == 0) return absl::OkStatus();
    DeviceGuard guard(device_.index);
    if (absl::Status s = CheckGuard(guard); !s.ok()) return s;
    return CudaStatus(
        cuda_raw::Accumulate(dst, src, count, dtype == DataType::kFloat64, factor, stream_->get()),
        device_, absl::StrCat("accumulate kernel (", count, " elements)"));
  }

  absl::Status CopyToHost(void* host, const void* device_src, size_t bytes) override {
    return HostCopy(host, device_src, bytes, cudaMemcpyDeviceToHost, "copy to host");
  }

  absl::Status CopyFromHost(void* device_dst, const void* host, size_t bytes) override {
    return HostCopy(device_dst, host, bytes, cudaMemcpyHostToDevice, "copy from host");
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> AllocateHost(size_t bytes) override {
    DeviceGuard guard(device_.index);
    if (absl::Status s = CheckGuard(guard); !s.ok()) return s;
    void* data = nullptr;
    const cudaError_t err = cudaMallocHost(&data, bytes);
    if (err != cudaSuccess) return AllocationError(err, bytes, "pinned host memory");
    return std::unique_ptr<DeviceMemory>(
        new CudaMemory(data, bytes, CudaMemory::Kind::kPinnedHost, stream_, device_.index));
  }

  absl::StatusOr<std::unique_ptr<Work>> Fence() override {
    DeviceGuard guard(device_.index);
    if (absl::Status s = CheckGuard(guard); !s.ok()) return s;
    cudaEvent_t event = nullptr;
    if (absl::Status s = CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                                    device_, "cudaEventCreate for a fence");
        !s.ok()) {
      return s;
    }
    auto work = std::make_unique<EventWork>(event, device_);  // destroys the event on any return
    if (absl::Status s =
            CudaStatus(cudaEventRecord(event, stream_->get()), device_, "recording a fence");
        !s.ok()) {
      return s;
    }
    return std::unique_ptr<Work>(std::move(work));
  }

 private:
  absl::Status CheckGuard(const DeviceGuard& guard) const {
    return CudaStatus(guard.status(), device_, "cudaSetDevice");
  }

  absl::Status AllocationError(cudaError_t err, size_t bytes, absl::string_view what) const {
    cudaGetLastError();  // not sticky: keep it from surfacing in a later launch check
    if (err != cudaErrorMemoryAllocation) {
      return CudaStatus(err, device_, absl::StrCat("allocating ", bytes, " bytes of ", what));
    }
    size_t free_bytes = 0, total_bytes = 0;
    std::string room;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      room = absl::StrCat(" (", free_bytes, " of ", total_bytes, " bytes of device memory free)");
    }
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat(device_.ToString(), ": cannot allocate ", bytes, " bytes of ", what, room));
  }

  absl::Status HostCopy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                        absl::string_view what) {
    if (bytes == 0) return absl::OkStatus();
    DeviceGuard guard(device_.index);
    if (absl::Status s = CheckGuard(guard); !s.ok()) return s;
    return CudaStatus(cudaMemcpyAsync(dst, src, bytes, kind, stream_->get()), device_,
                      absl::StrCat(what, " of ", bytes, " bytes"));
  }

  // A staging slot of at least `bytes` that no queued upload still reads.
  absl::StatusOr<StagingSlot*> AcquireStaging(size_t bytes) {
    for (StagingSlot& slot : staging_) {
      const cudaError_t err = cudaEventQuery(slot.uploaded);  // never recorded: reached
      if (err == cudaErrorNotReady) continue;
      if (err != cudaSuccess) return CudaStatus(err, device_, "a slice-table upload");
      if (slot.capacity >= bytes) return &slot;
    }
    const size_t capacity = std::max(kMinStagingBytes, bytes + bytes / 2);
    if (staging_.size() < kMaxStagingSlots) {
      StagingSlot slot;
      if (absl::Status s = NewStaging(capacity, &slot); !s.ok()) return s;
      staging_.push_back(slot);
      return &staging_.back();
    }
    // Every slot is queued (or too small): wait for the oldest upload, then reuse its slot.
    StagingSlot& slot = staging_[next_reuse_++ % staging_.size()];
    if (absl::Status s = CudaStatus(cudaEventSynchronize(slot.uploaded), device_,
                                    "waiting for a slice-table upload");
        !s.ok()) {
      return s;
    }
    if (slot.capacity >= bytes) return &slot;
    cudaFreeHost(slot.host);
    slot.host = nullptr;
    slot.capacity = 0;
    void* host = nullptr;
    const cudaError_t err = cudaMallocHost(&host, capacity);
    if (err != cudaSuccess) return AllocationError(err, capacity, "pinned staging memory");
    slot.host = host;
    slot.capacity = capacity;
    return &slot;
  }

  absl::Status NewStaging(size_t capacity, StagingSlot* slot) {
    const cudaError_t err = cudaMallocHost(&slot->host, capacity);
    if (err != cudaSuccess) return AllocationError(err, capacity, "pinned staging memory");
    slot->capacity = capacity;
    if (absl::Status s =
            CudaStatus(cudaEventCreateWithFlags(&slot->uploaded, cudaEventDisableTiming), device_,
                       "cudaEventCreate for a staging slot");
        !s.ok()) {
      cudaFreeHost(slot->host);
      return s;
    }
    return absl::OkStatus();
  }

  // The device copy of the slice table holds at least `bytes`. Growing it is ordered on the
  // stream: the old table is freed after the kernels that read it.
  absl::Status ReserveTable(size_t bytes) {
    if (table_ != nullptr && table_->size() >= bytes) return absl::OkStatus();
    table_.reset();
    absl::StatusOr<std::unique_ptr<DeviceMemory>> table =
        Allocate(std::max(kMinStagingBytes, bytes + bytes / 2));
    if (!table.ok()) return table.status();
    table_ = *std::move(table);
    return absl::OkStatus();
  }

  const Device device_;
  const std::shared_ptr<Stream> stream_;
  const bool memory_pools_;       // cudaMallocAsync is available
  const cudaEvent_t wait_event_;  // recorded on the streams WaitForStream joins
  std::vector<StagingSlot> staging_;
  size_t next_reuse_ = 0;
  std::unique_ptr<DeviceMemory> table_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BufferOps>> CreateCudaBufferOps(int index, void* stream) {
  const Device device = Device::Cuda(index);
  const std::string reason = CudaUnavailableReason();
  if (!reason.empty()) return absl::UnavailableError(absl::StrCat(device.ToString(), ": ", reason));
  const int count = CudaDeviceCount();
  if (index < 0 || index >= count) {
    return absl::UnavailableError(absl::StrCat(device.ToString(),
                                               ": no such device; this process sees ", count,
                                               " CUDA device(s) (CUDA_VISIBLE_DEVICES)"));
  }
  DeviceGuard guard(index);
  if (guard.status() != cudaSuccess) {
    return absl::UnavailableError(CudaStatus(guard.status(), device, "cudaSetDevice").message());
  }
  int memory_pools = 0;
  if (cudaDeviceGetAttribute(&memory_pools, cudaDevAttrMemoryPoolsSupported, index) !=
      cudaSuccess) {
    cudaGetLastError();
    memory_pools = 0;
  }
  cudaStream_t queue = static_cast<cudaStream_t>(stream);
  const bool owned = queue == nullptr;
  if (owned) {
    if (absl::Status s = CudaStatus(cudaStreamCreateWithFlags(&queue, cudaStreamNonBlocking),
                                    device, "cudaStreamCreate");
        !s.ok()) {
      return s;
    }
  }
  auto shared_stream = std::make_shared<Stream>(queue, owned, index);
  cudaEvent_t wait_event = nullptr;
  if (absl::Status s = CudaStatus(cudaEventCreateWithFlags(&wait_event, cudaEventDisableTiming),
                                  device, "cudaEventCreate");
      !s.ok()) {
    return s;
  }
  auto ops = std::make_unique<CudaBufferOps>(index, std::move(shared_stream), memory_pools != 0,
                                             wait_event);
  if (absl::Status s = ops->Reserve(); !s.ok()) return s;
  return std::unique_ptr<BufferOps>(std::move(ops));
}

bool BuiltWithCuda() { return true; }

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::string CudaUnavailableReason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::StrCat(
        "no usable CUDA driver or device (cudaGetDeviceCount: ", cudaGetErrorString(err), ")");
  }
  if (count == 0) return "no CUDA device visible (cudaGetDeviceCount found none)";
  return "";
}

}  // namespace overlap
