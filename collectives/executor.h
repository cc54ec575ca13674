// The executor interface: runs collectives on buffers, asynchronously, on numbered channels.
//
// An executor knows nothing about tensors, names or scheduling: the runtime decides what runs,
// in which order and on which channel, and guarantees that every rank starts the same collectives
// in the same order on each channel. Channels are independent: collectives on different channels
// may be in flight at the same time. The MPI executor (CPU) and the NCCL executor (GPU) implement
// this interface; the runtime drives both through it.
//
// Threading: one thread (the runtime's coordinator) calls Start and Test.
#ifndef OVERLAP_COLLECTIVES_EXECUTOR_H_
#define OVERLAP_COLLECTIVES_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/dtype.h"

namespace overlap {

enum class CollectiveKind : int32_t {
  kAllreduce = 0,
  kAllgatherv = 1,
  kBroadcast = 2,
  kReduceScatter = 3,
  kAlltoallv = 4,
  kBarrier = 5,
};

const char* CollectiveKindName(CollectiveKind kind);

// One collective over raw buffers. Counts and displacements are in elements of `dtype`.
struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kAllreduce;
  DataType dtype = DataType::kFloat32;
  // kSum, kMin, kMax, kProduct or kAdasum; the runtime turns kAverage into a sum and a scale.
  ReduceOp op = ReduceOp::kSum;
  // nullptr means in place: `recv` holds this rank's input (allreduce, broadcast).
  const void* send = nullptr;
  void* recv = nullptr;
  // Allreduce and broadcast: elements in the buffer. Reduce-scatter: elements of the input.
  int64_t count = 0;
  int root = 0;
  // Allgatherv: recv_counts/recv_displs per rank; send count is recv_counts[rank].
  // Reduce-scatter: recv_counts per rank. Alltoallv: all four per rank.
  std::vector<int64_t> send_counts, send_displs, recv_counts, recv_displs;
  // Adasum allreduce: the element counts of the tensors packed one after another in the buffer,
  // each combined with its own coefficients; empty means one tensor of `count` elements.
  std::vector<int64_t> segments;
  // Allreduce (a sum, min, max or product): run in two link classes, within each host and then
  // across hosts (collectives/hierarchical_allreduce.h), whatever its size, where the executor
  // splits its ranks by host (MpiExecutor with a host); elsewhere it runs as it would have, with
  // the same result up to the order of the sums. A plan's two-stage bucket (scheduler/plan.h).
  bool two_stage = false;
};

// A started collective.
class Work {
 public:
  virtual ~Work() = default;
  // True once the collective finished; an error if it failed. Never blocks.
  virtual absl::StatusOr<bool> Test() = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;

  // "mpi", "nccl".
  virtual const char* name() const = 0;
  virtual int num_channels() const = 0;

  // Starts `args` on `channel`. InvalidArgument if the arguments cannot be expressed on this
  // backend (for example a count above its limit); the message names the cause.
  virtual absl::StatusOr<std::unique_ptr<Work>> Start(int channel, const CollectiveArgs& args) = 0;

  // The CUDA stream (a cudaStream_t) the collectives of `channel` run on, for executors over
  // device buffers: the data plane queues its copies on it, so copy-in, collective and copy-out
  // run in order without the host waiting between them. nullptr for host executors.
  virtual void* channel_stream(int /*channel*/) const { return nullptr; }

  // Lets the collectives in flight advance, completing none, while the calling thread does long
  // host work between Tests (packing a bucket, copying results out): MPI moves a message's
  // fragments and libnbc's rounds only inside MPI calls, so a collective otherwise stalls for as
  // long as the copy takes. Cheap (microseconds); a no-op where a device or a progress thread
  // moves the data.
  virtual void Poke() {}

  // Whether Start queues the collective on channel_stream(channel) behind the work queued there
  // before, and the device runs it with no further host calls (NCCL): then a channel may take
  // the next collective, and the copies around it, before the last one finished. False where
  // the host drives a collective to its end (MPI, and MPI staged through host memory).
  virtual bool stream_ordered() const { return false; }

  // Whether CollectiveArgs::two_stage runs an allreduce in another form than it would run
  // otherwise (an MpiExecutor split by host whose allreduces are flat unasked): a planner may
  // then choose the form per bucket, and a probe can time it.
  virtual bool offers_two_stage() const { return false; }

  // Called once when the job cannot continue (a collective failed or timed out): abandons the
  // collectives in flight so that nothing waits on a dead peer (NCCL: ncclCommAbort). Work
  // started before fails or never completes; no Start may follow.
  virtual void Abort() {}
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_EXECUTOR_H_
