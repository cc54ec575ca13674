// The GPU executor: NCCL collectives, one communicator and CUDA stream per channel.
//
// Buffers are device pointers. Start() enqueues the collective on the channel's stream and
// records a CUDA event after it; Work::Test() queries the event and the communicator's
// asynchronous error, so the runtime's data plane drives NCCL exactly as it drives MPI, with the
// same collective timeout. Collectives NCCL lacks are composed from grouped point-to-point calls:
// allgatherv and alltoallv from ncclSend/ncclRecv, reduce-scatter with uneven counts from one
// ncclReduce per rank.
#ifndef OVERLAP_COLLECTIVES_NCCL_EXECUTOR_H_
#define OVERLAP_COLLECTIVES_NCCL_EXECUTOR_H_

#include <mpi.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/executor.h"

namespace overlap {

class NcclExecutor : public Executor {
 public:
  // Collective over `comm`: rank 0 creates an NCCL unique id per channel and broadcasts it over
  // MPI; every rank binds `device` and creates its communicators and streams. Unavailable with
  // the CUDA or NCCL error text when there is no usable GPU.
  static absl::StatusOr<std::unique_ptr<NcclExecutor>> Create(MPI_Comm comm, int device,
                                                              int num_channels);
  ~NcclExecutor() override;

  const char* name() const override { return "nccl"; }
  int num_channels() const override { return static_cast<int>(channels_.size()); }
  absl::StatusOr<std::unique_ptr<Work>> Start(int channel, const CollectiveArgs& args) override;

  struct Channel;

 private:
  NcclExecutor(int rank, int size, int device);

  int rank_;
  int size_;
  int device_;
  std::vector<std::unique_ptr<Channel>> channels_;
};

// Number of CUDA devices visible to this process; 0 when there is no GPU or no driver.
int CudaDeviceCount();

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_NCCL_EXECUTOR_H_
