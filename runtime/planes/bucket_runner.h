// BucketRunner: runs a plan's sliced buckets (runtime/plan/executable_plan.h: allreduce, and DeAR's
// reduce-scatter and all-gather) for the tensors of one device, over that device's buffer
// operations (collectives/buffer_ops.h) and an executor (collectives/executor.h). The same code
// serves host tensors (CPU buffer ops, MPI) and device tensors (CUDA buffer ops, NCCL or MPI staged
// through host memory); only the BufferOps and the Executor it is given differ.
//
// A bucket's life here:
//  1. Start(): the planned executor (runtime/planes/planned_mode.h) hands over the bucket with, per
//     slice, the tensor's input (or nothing: this rank contributes zeros). The slices are packed
//     at once, prescaled, into a buffer kept for that bucket across passes (an allreduce of one
//     whole tensor alone runs in the user's buffer instead); an all-gather waits until its
//     reduce-scatter's chunk is in. A delayed plan's residual is added to the packed buffer
//     through BucketInput::drain.
//  2. Progress(): per channel, in the order of Start, the next bucket's collective starts once
//     the channel's previous one finished; a reduce-scatter's chunk is kept for its all-gather.
//     A compressed bucket (ExecBucket::compression) runs the compression stage's rounds instead
//     (runtime/planes/compression_stage.h): its packed values are compressed with the bucket's
//     own error-feedback residual, the payloads combined, and the sums decoded back into the
//     packed buffer (on a device, on the channel's stream, fenced before the bucket is done).
//  3. Pieces(): once done, where the reduced values of each slice are (buffer, offset).
//  4. Deliver(): once every slice of a tensor is in, its pieces are copied into its output with
//     the finishing scale (postscale, average); the operation completes when that copy is done.
//
// Device ordering. A bucket's buffers are allocated on its channel's stream, which writes them
// first (stream-ordered memory is its stream's from the allocation on). Each channel packs through
// a BufferOps queued on the executor's stream for that channel (Executor::channel_stream), so a
// stream-ordered executor (NCCL) runs packing, collective and the next bucket's packing in queue
// order without the host waiting. Where the pack stream is not the one the collective reads on (an
// executor that reads device memory from the host), the runner fences the packing and starts the
// collective only once the fence is done. Inputs written on a producer's stream (Tensor::stream)
// are waited for before packing. Delivery copies run on a stream of their own and complete the
// operation only after a fence; the buffers they read are held until then, so the pool never hands
// out a buffer with work still queued on it. On the host every copy runs at once, in pieces with
// Executor::Poke between them so that MPI collectives in flight keep moving (the same arithmetic as
// collectives/scaling.h, so results are bit-identical).
//
// Errors name the rank, the bucket's tensors and the cause; a collective that runs past `timeout`
// fails with DeadlineExceeded. After an error the job cannot continue (the caller fails
// everything).
//
// Threading: the coordinator thread only.
#ifndef OVERLAP_RUNTIME_PLANES_BUCKET_RUNNER_H_
#define OVERLAP_RUNTIME_PLANES_BUCKET_RUNNER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/buffer_ops.h"
#include "collectives/executor.h"
#include "runtime/api/pending_op.h"
#include "runtime/api/timeline.h"
#include "runtime/plan/executable_plan.h"
#include "runtime/planes/compression_stage.h"

namespace overlap {

// "'a', 'b', 'c' and 2 more", for messages about a bucket or a unit.
std::string UnitNames(const std::vector<std::shared_ptr<const Response>>& responses);

// What this rank puts into one sliced bucket, by slice (the bucket's slices, in order).
struct BucketInput {
  struct Source {
    const PendingOp* op = nullptr;  // null: this rank contributes zeros (joined, or diverged)
  };
  std::vector<Source> sources;
  // An allreduce of one whole tensor alone, not prescaled, outside a delayed plan: reduced in the
  // user's buffer (no pack, no copy out).
  bool in_place = false;
  // Delayed plans: adds the bucket's residual into its packed values, queueing on `ops` (the
  // packing's buffer ops) where they are a device's.
  std::function<absl::Status(uint8_t* packed, BufferOps& ops)> drain;
};

// One sliced bucket of one pass, from Start until the caller drops it. The caller reads done and
// skipped; the rest is the runner's.
struct BucketJob {
  const ExecutablePlan* plan = nullptr;  // kept alive by the caller while the job lives
  int bucket = 0;
  BucketKind kind = BucketKind::kAllreduce;
  int channel = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::shared_ptr<DeviceMemory> buffer;  // packed slices, then their reduced values
  std::shared_ptr<DeviceMemory> chunk;   // reduce-scatter: this rank's part
  bool in_place = false;                 // one whole tensor reduced in the user's buffer
  void* in_place_data = nullptr;         // its output, where the reduced values are
  CollectiveArgs args;                   // once prepared
  bool prepared = false;                 // packed (or, all-gathers, given their chunk)
  std::unique_ptr<Work> pack_fence;      // the packing, where the collective reads elsewhere
  std::unique_ptr<Work> work;
  // Compressed buckets: the packed buffer as the one tensor the compression stage compresses,
  // the rounds' state, and whether `work` is the fence of the decode (on a device).
  std::vector<ReadyOp> compressed_op;
  std::unique_ptr<CompressedBucketState> compressed;
  bool decoding = false;
  bool skipped = false;  // delayed plans: off its period, folded into the residual; never run
  bool done = false;
  absl::Time started;
};

// Where one slice's reduced values are, for Deliver.
struct ReducedPiece {
  std::shared_ptr<DeviceMemory> buffer;  // null: already in the output (in place)
  int64_t buffer_offset = 0;             // elements into buffer
  int64_t offset = 0, count = 0;         // elements of the tensor
};

class BucketRunner {
 public:
  using Done = std::function<void(PendingOp& op, const absl::Status& status)>;

  // Runs buckets over `executor` (not owned; outlives the runner) with the tensors on `device`.
  // One BufferOps per channel on the executor's channel stream, and one for delivery (a stream of
  // its own). `timeout`: how long a started collective may run. `poke` runs between the pieces of
  // long host copies. `compression` (not owned, may be null: a compressed bucket then fails)
  // compresses the compressed buckets. Unavailable naming the device when its buffer ops cannot
  // be made.
  static absl::StatusOr<std::unique_ptr<BucketRunner>> Create(
      Executor* executor, Device device, int rank, int size, Timeline* timeline,
      absl::Duration timeout, CompressionStage* compression = nullptr);
  // The same with the buffer ops given: `ops[c]` packs for channel c (must queue on
  // executor->channel_stream(c) where the executor is stream-ordered), `deliver` copies out.
  BucketRunner(Executor* executor, std::vector<std::unique_ptr<BufferOps>> ops,
               std::unique_ptr<BufferOps> deliver, int rank, int size, Timeline* timeline,
               absl::Duration timeout, CompressionStage* compression = nullptr);
  ~BucketRunner();

  Device device() const;
  Executor* executor() const { return executor_; }

  // A job for bucket `bucket` of `plan` (sliced), not yet started: for a delayed plan's bucket
  // off its period, the caller marks it skipped and done instead of starting it.
  static std::unique_ptr<BucketJob> NewJob(const ExecutablePlan* plan, int bucket);
  // Queues `job` on its channel (the caller keeps it alive until done) and packs it from `input`
  // unless it is an all-gather. An error (packing failed) means the job cannot continue.
  absl::Status Start(BucketJob* job, const BucketInput& input);
  // Starts and finishes collectives, and completes deliveries whose copies are done.
  absl::Status Progress();
  // The reduced values of a finished allreduce or all-gather, by slice of its bucket.
  std::vector<ReducedPiece> Pieces(const BucketJob& job) const;
  // Copies `op`'s pieces into its output with its finishing scale, then calls done(op, status)
  // (at once on the host; after a fence on a device, from Progress).
  void Deliver(PendingOp op, std::vector<ReducedPiece> pieces, Done done);

  // Nothing queued, running or being delivered.
  bool idle() const;
  // Forgets queued jobs, chunks and deliveries (a fatal error; their operations are failed by
  // the caller, or here for deliveries, with `status`).
  void FailAll(const absl::Status& status);
  // A new plan: forgets queued jobs, chunks and the kept buffers (sized for the old plan's
  // buckets).
  void Reset();
  // Bytes of the buffers kept for reuse, in use or free.
  int64_t held_bytes() const;

 private:
  struct Delivery {
    PendingOp op;
    std::vector<ReducedPiece> pieces;  // held until the copy is done
    std::unique_ptr<Work> fence;
    Done done;
  };
  class Pool;

  absl::Status Prepare(BucketJob* job, const BucketInput* input);
  absl::Status Launch(BucketJob* job);
  // Compresses a compressed bucket's packed values into its first round's payload; sets `args`.
  absl::Status BeginCompressed(BucketJob* job, int64_t count, BufferOps& ops, CollectiveArgs* args);
  // After a compressed bucket's collective: the next round, or the decode. True once the packed
  // buffer holds the sums (on a device: once the decode's fence is started, `decoding`).
  absl::StatusOr<bool> ContinueCompressed(BucketJob* job);
  void Finish(BucketJob* job);
  // Copies `slices` on `ops`: on the host in pieces with Poke between them, on a device at once.
  absl::Status CopyOn(BufferOps& ops, const std::vector<CopySlice>& slices, DataType dtype,
                      CopyScaling scaling);
  std::string Describe(const BucketJob& job) const;
  bool on_host() const;

  Executor* const executor_;
  const std::vector<std::unique_ptr<BufferOps>> ops_;
  const std::unique_ptr<BufferOps> deliver_;
  const int rank_;
  const int size_;
  Timeline* const timeline_;
  const absl::Duration timeout_;
  CompressionStage* const compression_;
  std::unique_ptr<Pool> pool_;
  std::vector<std::deque<BucketJob*>> channel_jobs_;                // by channel, in Start order
  absl::flat_hash_map<int, std::shared_ptr<DeviceMemory>> chunks_;  // by reduce-scatter bucket
  std::deque<Delivery> deliveries_;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLANES_BUCKET_RUNNER_H_
