// The data plane for CUDA tensors, with the executor OVERLAP_EXECUTOR selects.
//
// Created when the first agreed CUDA operation reaches it: every rank reaches that point at the
// same place in the agreed order (a joined rank too), so the collective setup (communicator
// duplication, the NCCL id broadcast, the check for ranks sharing a GPU) lines up across ranks
// and a job that never submits a CUDA tensor never touches CUDA. When setup fails, every CUDA
// operation fails with the reason, on every rank.
//
// Threading: the coordinator thread only.
#ifndef OVERLAP_RUNTIME_PLANES_CUDA_PLANE_H_
#define OVERLAP_RUNTIME_PLANES_CUDA_PLANE_H_

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/executor.h"
#include "runtime/config.h"
#include "runtime/planes/data_plane.h"
#include "runtime/planes/device_backend.h"
#include "runtime/planes/plane_context.h"
#include "runtime/api/timeline.h"

namespace overlap {

class CudaPlane {
 public:
  // `comm` is the runtime's communicator (MPI_COMM_WORLD's duplicate, or a process set's), which
  // the setup duplicates and must outlive the plane; `context.rank` and `context.size` are this
  // rank's place in it.
  // `default_device` names the GPU a rank sets up on when it has no tensor to take the device
  // from (its first CUDA operation is a joined rank's zeros, or SetUpOnce). `split` is how the
  // ranks split by host for hierarchical allreduces or a plan's two-stage buckets
  // (device_backend.h): the MPI path staged through host memory follows it; NCCL stays flat,
  // since its own rings and trees already keep each host's share of the traffic on its links.
  CudaPlane(MPI_Comm comm, PlaneContext context, std::function<int()> default_device,
            HostSplit split);
  ~CudaPlane();

  // Sets the plane up on `default_device` now, unless it is already: a collective call, made by
  // every rank at the same agreed point (the planned executor's freeze). Returns the outcome of
  // the first setup, which every later Submit reports too.
  absl::Status SetUpOnce();
  // Queues agreed CUDA operations, setting the plane up on the first call (on the device of the
  // first tensor, or `default_device` for a joined rank's zeros) unless SetUpOnce did.
  void Submit(std::vector<ReadyOp> ready);
  absl::Status Progress();
  bool idle() const;
  void FailAll(const absl::Status& status);
  // After a fatal error: abandons collectives in flight (NCCL: ncclCommAbort).
  void Abort();

  // The executor and device of the plane, once set up without error (null before): the bucket
  // runner of a plan's CUDA tensors runs on them too.
  Executor* executor() const { return plane_ != nullptr ? executor_.get() : nullptr; }
  Device device() const;

  // "nccl", "mpi+host-staging", or "" before setup.
  std::string executor_name() const;

 private:
  absl::Status SetUp(int device);
  absl::Status SetUpOnce(int device);

  const MPI_Comm comm_;
  const Config config_;
  const int rank_;
  const int size_;
  const std::function<int()> default_device_;
  const HostSplit split_;
  Timeline* const timeline_;
  CompressionStage* const compression_;
  const DataPlane::CompleteFn complete_;
  CommMeter* const comm_meter_;  // may be null
  Device device_;
  bool set_up_ = false;
  absl::Status setup_error_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<DataPlane> plane_;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLANES_CUDA_PLANE_H_
