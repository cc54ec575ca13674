// The GPU executor: NCCL collectives, one communicator and CUDA stream per channel.
//
// Buffers are device pointers. Start() enqueues the collective on the channel's stream and
// records a CUDA event after it; Work::Test() queries the event and the communicator's
// asynchronous error, so the runtime's data plane drives NCCL exactly as it drives MPI, with the
// same collective timeout. Collectives NCCL lacks are composed from grouped point-to-point calls:
// allgatherv and alltoallv from ncclSend/ncclRecv, reduce-scatter with uneven counts from one
// ncclReduce per rank.
//
// Watchdog: every Test() also reads ncclCommGetAsyncError, so a communicator NCCL found broken
// fails the collective at once; when the runtime gives up on a collective (its timeout, a lost
// peer) it calls Abort(), which runs ncclCommAbort on every channel so that no kernel keeps
// waiting for a dead peer (the hang of Horovod issue 3611).
//
// Where overlap is built without CUDA only CreateNcclExecutor exists, returning Unavailable.
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
  // FailedPrecondition, on every rank, when two ranks of one host use the same GPU: NCCL
  // refuses them (the runtime then stages through host memory, see staging_executor.h).
  static absl::StatusOr<std::unique_ptr<NcclExecutor>> Create(MPI_Comm comm, int device,
                                                              int num_channels);
  ~NcclExecutor() override;

  const char* name() const override { return "nccl"; }
  bool stream_ordered() const override { return true; }
  int num_channels() const override { return static_cast<int>(channels_.size()); }
  absl::StatusOr<std::unique_ptr<Work>> Start(int channel, const CollectiveArgs& args) override;
  void* channel_stream(int channel) const override;
  void Abort() override;

  struct Channel;

 private:
  NcclExecutor(int rank, int size, int device);

  int rank_;
  int size_;
  int device_;
  std::vector<std::unique_ptr<Channel>> channels_;
};

// NcclExecutor::Create where overlap was built with CUDA; Unavailable elsewhere.
absl::StatusOr<std::unique_ptr<Executor>> CreateNcclExecutor(MPI_Comm comm, int device,
                                                             int num_channels);

// The version of the NCCL library overlap runs with, as ncclGetVersion gives it (22803 for
// 2.28.3), whether or not this machine has a GPU; 0 where overlap was built without CUDA.
int NcclVersion();

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_NCCL_EXECUTOR_H_
