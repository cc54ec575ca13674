// Buffer operations on one device: allocate, scaled batched copies, host transfers and fences.
//
// The data plane, fusion and the host-staging executor work through this interface only, so the
// same code moves host and device tensors. A BufferOps instance queues its work in order on one
// stream (CUDA) or runs it at once (CPU); work from different instances is unordered unless
// WaitForStream joins them. Every method returns at once; Fence() says when queued work is done.
//
// Threading: one thread at a time per instance (the runtime's coordinator).
#ifndef OVERLAP_COLLECTIVES_BUFFER_OPS_H_
#define OVERLAP_COLLECTIVES_BUFFER_OPS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/device.h"
#include "collectives/dtype.h"
#include "collectives/executor.h"

namespace overlap {

// Memory on one device, freed when destroyed: for CUDA, after the work queued so far on the
// stream of the BufferOps that allocated it (work on other streams that uses it must be joined
// to that stream first, with WaitForStream).
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
};

// One piece of a batched copy: `count` elements from `src` to `dst`. A null `src` writes zeros.
// Slices of one batch must not overlap each other, except that `dst` may equal `src`. Pointers
// are aligned to the element size; 16-byte alignment lets the CUDA kernel move whole vectors.
struct CopySlice {
  void* dst = nullptr;
  const void* src = nullptr;
  int64_t count = 0;
};

// What a batched copy does to each element on the way: floating-point dtypes are multiplied by
// `factor` (fp16/bf16 through fp32, rounded to nearest even, as collectives/scaling.h); integer
// dtypes are divided by `divisor`, rounding toward zero (an integer average). factor must be 1 for
// integer dtypes, divisor 1 for floating-point ones.
struct CopyScaling {
  double factor = 1.0;
  int64_t divisor = 1;
};

// The scaling that turns a collective's raw result for `op` into what the caller asked for
// (postscale, and an average's division by `size`), as one batched copy: collectives/scaling.h's
// FinishReduced, bit for bit.
inline CopyScaling FinishScaling(DataType dtype, ReduceOp op, double postscale, int size) {
  const bool average = op == ReduceOp::kAverage;
  if (!IsFloatingPoint(dtype)) return CopyScaling{1.0, average ? size : 1};
  return CopyScaling{postscale * (average ? 1.0 / size : 1.0), 1};
}

class BufferOps {
 public:
  virtual ~BufferOps() = default;

  virtual Device device() const = 0;

  // The CUDA stream this instance queues on (a cudaStream_t), or nullptr on the CPU.
  virtual void* stream() const = 0;

  // `bytes` of memory on device(); ResourceExhausted naming the size when it cannot be had.
  virtual absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) = 0;

  // Work queued after this call waits for the work queued so far on `stream` (another
  // cudaStream_t, e.g. the one a framework wrote a gradient on), without blocking the host.
  // nullptr means the device's legacy default stream. CPU: nothing to wait for.
  virtual absl::Status WaitForStream(void* stream) = 0;

  // Copies every slice with `scaling`, in one kernel launch on a device however many slices.
  // InvalidArgument, naming the slice, for an unknown dtype, a negative count, a null or
  // misaligned pointer, or a scaling that does not fit the dtype (see CopyScaling; divisor >= 1).
  virtual absl::Status Copy(absl::Span<const CopySlice> slices, DataType dtype,
                            CopyScaling scaling) = 0;

  // dst[i] += src[i] * factor for `count` float32 or float64 elements, in that dtype's arithmetic
  // with no fused multiply-add (the bits of collectives/scaling.h's ScaledAdd): error feedback's
  // residuals on the tensor's device. dst and src must not overlap. InvalidArgument for another
  // dtype, a negative count or a null pointer.
  virtual absl::Status Accumulate(void* dst, const void* src, int64_t count, DataType dtype,
                                  double factor) = 0;

  // Byte copies between host memory and device(); `host` should be pinned (AllocateHost) for the
  // copy to run asynchronously. On the CPU these are memcpy.
  virtual absl::Status CopyToHost(void* host, const void* device_src, size_t bytes) = 0;
  virtual absl::Status CopyFromHost(void* device_dst, const void* host, size_t bytes) = 0;

  // Host memory the device copies to and from at full speed (pinned for CUDA).
  virtual absl::StatusOr<std::unique_ptr<DeviceMemory>> AllocateHost(size_t bytes) = 0;

  // A Work whose Test() is true once everything queued so far has finished, and an error naming
  // the device if that work failed. CPU: done at once.
  virtual absl::StatusOr<std::unique_ptr<Work>> Fence() = 0;
};

// Queues `count` zeros of `dtype` at `dst` on ops: a Copy of one slice without a source.
absl::Status WriteZeros(BufferOps& ops, void* dst, int64_t count, DataType dtype);

// Operations on host memory, done on the calling thread.
std::unique_ptr<BufferOps> CreateCpuBufferOps();

// Operations on `device`: the CPU's, or CUDA device k's queued on `stream` (a cudaStream_t; null
// means a new non-blocking stream that the instance owns). Unavailable, naming the cause, when
// overlap was built without CUDA or the device cannot be used.
absl::StatusOr<std::unique_ptr<BufferOps>> CreateBufferOps(Device device, void* stream);

// CUDA devices this process sees; 0 when built without CUDA, without a driver or without a GPU.
int CudaDeviceCount();

// Whether overlap was built with CUDA (the toolkit was found at build time), whatever this
// machine has.
bool BuiltWithCuda();

// Why CUDA cannot be used here ("overlap was built without CUDA", "no CUDA driver", ...), or ""
// when it can.
std::string CudaUnavailableReason();

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_BUFFER_OPS_H_
