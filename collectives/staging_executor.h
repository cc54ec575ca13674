// An executor over device buffers that runs a host executor (MPI) through pinned host memory.
//
// For CUDA tensors where NCCL cannot run: ranks sharing one GPU (NCCL refuses them), a build
// without NCCL, or OVERLAP_EXECUTOR=mpi. Each collective copies its device input to a pinned host
// buffer on the channel's stream, starts the host collective once that copy is done, and copies
// the result back on the same stream; Work::Test() advances these phases without blocking, so the
// runtime's data plane drives it like any other executor. Each collective stages through pinned
// buffers of its own (pooled per channel), so several may be in flight on one channel, as when a
// plan's bucket runner and a data plane share the executor.
//
// Threading: one thread (the runtime's coordinator) calls Start and Test, as for every executor.
#ifndef OVERLAP_COLLECTIVES_STAGING_EXECUTOR_H_
#define OVERLAP_COLLECTIVES_STAGING_EXECUTOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/buffer_ops.h"
#include "collectives/executor.h"

namespace overlap {

class StagingExecutor : public Executor {
 public:
  // `host` runs the collectives on host buffers; `device` is where the buffers given to Start
  // live; `rank` is this process's place in `host`'s group. One stream (BufferOps) per channel
  // of `host`. Unavailable when the device cannot be used.
  static absl::StatusOr<std::unique_ptr<StagingExecutor>> Create(std::unique_ptr<Executor> host,
                                                                 Device device, int rank);
  // The same with the channels' streams given: `channel_ops[c]` copies for channel c (one per
  // channel of `host`, else InvalidArgument). The tests' proxy device stages through its own.
  static absl::StatusOr<std::unique_ptr<StagingExecutor>> Create(
      std::unique_ptr<Executor> host, std::vector<std::unique_ptr<BufferOps>> channel_ops,
      int rank);

  const char* name() const override { return name_.c_str(); }
  int num_channels() const override { return host_->num_channels(); }
  absl::StatusOr<std::unique_ptr<Work>> Start(int channel, const CollectiveArgs& args) override;
  void* channel_stream(int channel) const override;
  void Poke() override { host_->Poke(); }
  bool offers_two_stage() const override { return host_->offers_two_stage(); }
  void Abort() override { host_->Abort(); }

  struct Channel;
  class StagedWork;
  ~StagingExecutor() override;

 private:
  StagingExecutor(std::unique_ptr<Executor> host, int rank);

  std::unique_ptr<Executor> host_;
  const int rank_;
  const std::string name_;
  std::vector<std::unique_ptr<Channel>> channels_;
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_STAGING_EXECUTOR_H_
