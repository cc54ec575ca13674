// Runs the operations that negotiation agreed on, through an Executor.
//
// Consecutive allreduces with the same dtype, op and scaling are fused into buckets of at most
// fusion_threshold_bytes (a grouped allreduce always stays whole); every other operation is a
// bucket of its own. Buckets go to channels round-robin, so the k-th bucket of every rank lands
// on the same channel and each channel sees the same sequence on every rank. A channel runs its
// buckets in order through its own fusion buffer: one at a time where the host drives the
// collective (MPI), several queued back to back on the channel's stream where the executor is
// stream-ordered (NCCL), so that none waits for the host to see the previous one finish.
//
// The plane is device-neutral: it moves bytes through BufferOps (collectives/buffer_ops.h), one
// instance per channel queued on the executor's channel stream, so the same code serves host
// tensors with MPI and CUDA tensors with NCCL (or MPI staged through host memory). For CUDA, a
// bucket's copies wait on the streams its tensors were written on, copy-in, collective and
// copy-out run in stream order, and the operations complete once a fence after the copy-out has
// passed: the host never synchronises the device.
//
// Threading: the coordinator thread only.
#ifndef OVERLAP_RUNTIME_PLANES_DATA_PLANE_H_
#define OVERLAP_RUNTIME_PLANES_DATA_PLANE_H_

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "collectives/buffer_ops.h"
#include "collectives/executor.h"
#include "runtime/planes/compression_stage.h"
#include "runtime/config.h"
#include "runtime/negotiation/negotiator.h"
#include "runtime/planes/plane_context.h"
#include "runtime/api/timeline.h"

namespace overlap {

class DataPlane {
 public:
  using CompleteFn = PlaneContext::CompleteFn;

  // A plane for host tensors. `track_prefix` starts the names of this plane's channel tracks in
  // the timeline.
  DataPlane(Executor* executor, PlaneContext context, std::string track_prefix = "");

  // A plane for tensors on `device`, over an executor whose buffers live there. Unavailable when
  // the device cannot be used.
  static absl::StatusOr<std::unique_ptr<DataPlane>> OnDevice(Device device, Executor* executor,
                                                             PlaneContext context,
                                                             std::string track_prefix);

  // Queues operations in the order every rank agreed on.
  void Submit(std::vector<ReadyOp> ready);

  // Starts queued buckets on free channels and finishes the ones that completed. Never blocks.
  // Returns an error (and stops) when a collective fails or runs past collective_timeout_s:
  // the job cannot continue after that.
  absl::Status Progress();

  // True when nothing is queued or running.
  bool idle() const;

  // Fails every queued and running operation with `status`.
  void FailAll(const absl::Status& status);

  // The last uncompressed allreduces this plane ran, oldest first: bytes and seconds from start
  // to completion on this rank. The scheduler fits the link cost to them.
  struct Timing {
    int64_t bytes = 0;
    double seconds = 0;
  };
  static constexpr size_t kMaxTimings = 512;
  const std::deque<Timing>& timings() const { return timings_; }

 private:
  struct Bucket {
    std::vector<ReadyOp> ops;
    OpKind kind = OpKind::kAllreduce;
    int channel = 0;
    bool fused = false;
    std::unique_ptr<Work> work;
    std::unique_ptr<Work> finishing;        // the fence after the copy-out; set by Finish
    std::unique_ptr<DeviceMemory> scratch;  // prescaled input outside the fusion buffer
    std::unique_ptr<CompressedBucketState> compressed;  // compressed allreduces only
    // Started with its copy-out and fence queued behind the collective at once (Pipelined).
    bool pipelined = false;
    absl::Time queued, started;
  };
  struct Channel {
    // In order. The front is running when its work is set; where it is pipelined, up to
    // kMaxPipelined buckets from the front on may be running.
    std::deque<Bucket> buckets;
    absl::Time front_since;  // when the last bucket left the front
    std::unique_ptr<BufferOps> ops;
    std::unique_ptr<DeviceMemory> fusion_buffer;
  };

  DataPlane(Device device, std::vector<std::unique_ptr<BufferOps>> channel_ops, Executor* executor,
            PlaneContext context, std::string track_prefix);

  // Over a stream-ordered executor (NCCL), buckets other than compressed allreduces (whose later
  // rounds the host starts) are pipelined: started with copy-in, collective, copy-out and fence
  // queued on the channel's stream in one go, up to kMaxPipelined in flight, so that a
  // bucket never waits for the host to see the one before it finish. The limit keeps each
  // channel's slice-table staging (16 slots, up to 3 copies a bucket) from running out, which
  // would make the coordinator wait on the device.
  static constexpr int kMaxPipelined = 4;
  bool Pipelined(const Bucket& bucket) const;
  absl::Status StartPipelined(Bucket* bucket);
  // Completes a bucket that failed to start, naming the rank.
  void StartFailed(Bucket* bucket, const absl::Status& s);
  // Starts the pipelined buckets behind the front of `channel`.
  void QueueAhead(Channel& channel);
  // Completes and starts buckets at the front of `channel`.
  absl::Status ProgressFront(Channel& channel, absl::Duration limit);
  absl::Status Start(Bucket* bucket);
  // After a compressed bucket's collective: true when it started another round.
  absl::StatusOr<bool> ContinueCompressed(Bucket* bucket);
  absl::Status StartAllreduce(Bucket* bucket, CollectiveArgs* args);
  absl::Status StartOther(Bucket* bucket, CollectiveArgs* args);
  // Makes the queued copies wait for the streams the bucket's tensors were written on.
  absl::Status WaitForProducers(Bucket* bucket);
  BufferOps* OpsOf(const Bucket& bucket) {
    return channels_[static_cast<size_t>(bucket.channel)].ops.get();
  }
  // Points the handle's output at fresh memory shaped like `like` but with `rows` rows.
  absl::StatusOr<void*> AllocateOutput(Bucket* bucket, PendingOp& op, const Tensor& like,
                                       int64_t rows);
  // Queues the copy-out and the fence that completes the bucket.
  absl::Status Finish(Bucket* bucket);
  // The bucket's collective in the timeline, and its timing for the link-cost fit.
  void RecordFinished(const Bucket& bucket, absl::Time done);
  absl::Status FinishAllreduce(Bucket* bucket);
  void Complete(Bucket* bucket, const absl::Status& status);
  std::string Describe(const Bucket& bucket) const;

  const Device device_;
  Executor* const executor_;
  const Config config_;
  const int rank_;
  const int size_;
  Timeline* const timeline_;
  CompressionStage* const compression_;
  const CompleteFn complete_;
  CommMeter* const comm_meter_;  // may be null
  const std::string track_prefix_;
  std::vector<Channel> channels_;
  int next_channel_ = 0;
  std::deque<Timing> timings_;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLANES_DATA_PLANE_H_
