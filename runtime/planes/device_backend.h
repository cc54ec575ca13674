// DeviceBackend: what the runtime needs of the accelerator its device tensors live on: how many
// devices this process sees, buffer operations on one of them, and an executor that moves device
// buffers between ranks. The CUDA plane (runtime/planes/cuda_plane.h), the data plane on a device and the
// bucket runner (runtime/planes/bucket_runner.h) reach the device only through it.
//
// The backend in force is CUDA's (buffer ops from collectives/buffer_ops.h; NCCL, or MPI staged
// through host memory, per OVERLAP_EXECUTOR). A test binary may install another before Init - a
// device that keeps its bytes in host memory but queues its work on streams
// (tests/fakes/proxy_device.h) - so that the device code path runs on machines without a GPU. The
// shipped library never installs one and reads no setting for it: the seam is a function call
// that only test builds make.
//
// Threading: Installed() may be called from any thread; install before Init, never while a
// runtime is up.
#ifndef OVERLAP_RUNTIME_PLANES_DEVICE_BACKEND_H_
#define OVERLAP_RUNTIME_PLANES_DEVICE_BACKEND_H_

#include <mpi.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/buffer_ops.h"
#include "collectives/executor.h"
#include "runtime/config.h"

namespace overlap {

// How an executor over MPI splits its ranks by host (MpiExecutorOptions::host, ::hierarchical):
// host -1 is flat; otherwise every allreduce of 64 KiB or more runs hierarchically
// (OVERLAP_HIERARCHICAL_ALLREDUCE), or, with `hierarchical` false, only a plan's two-stage buckets
// (OVERLAP_TWO_STAGE).
struct HostSplit {
  int host = -1;
  bool hierarchical = true;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // Devices this process sees (CudaDeviceCount for CUDA).
  virtual int DeviceCount() const = 0;
  // Why no device can be used here, or "".
  virtual std::string UnavailableReason() const = 0;
  // Buffer operations on `device` queued on `stream` (null: a stream of their own).
  virtual absl::StatusOr<std::unique_ptr<BufferOps>> CreateBufferOps(Device device,
                                                                     void* stream) const = 0;
  // An executor over `device` buffers for the ranks of `comm` (this rank is `rank`): a collective
  // setup every rank makes at the same point. `split` as MpiExecutorOptions::host and
  // ::hierarchical, for an executor over MPI (NCCL follows the topology itself).
  // `note` receives a line for the log when the executor is a fallback (NCCL refused).
  virtual absl::StatusOr<std::unique_ptr<Executor>> CreateExecutor(MPI_Comm comm, int rank,
                                                                   int device, const Config& config,
                                                                   const HostSplit& split,
                                                                   std::string* note) const = 0;
};

// The backend in force: the one a test installed, or CUDA's.
const DeviceBackend& Devices();

// Test builds only: makes `backend` the one in force for the rest of the process (null restores
// CUDA's). Call before Init.
void InstallDeviceBackendForTesting(std::unique_ptr<DeviceBackend> backend);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLANES_DEVICE_BACKEND_H_
