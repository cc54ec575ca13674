// PlanDelays: runs a scheduled plan's delayed updates and update periods (DeFT's two moves) per
// bucket, inside the planned executor (runtime/planes/planned_mode.h).
//
// Passes: the plan in force runs one pass per step; a tensor's submissions since the plan was
// adopted are numbered k = 0, 1, ... (every rank alike), and submission k runs in pass k. A
// bucket with delay d, period p and phase f (scheduler/plan.h) does, in pass k:
//   - communicate, when k % p == f: its slices of submission k, plus its residual, are reduced;
//     the residual becomes zero;
//   - otherwise fold: its slices of submission k are added to its residual, nothing is sent
//     (error feedback: for every rank, sent + residual = the sum of what it submitted, exactly);
//   - the result of its communicating pass m reaches the program with submission m + d.
// Submission k of a tensor therefore receives, in each of its slices, the reduced result its
// bucket produced in pass k - d when that pass communicated, and zeros otherwise; its handle's
// has_update() is false only when no slice received anything (the first d steps after the plan
// is adopted, and off-period steps of a tensor whose buckets all share a phase).
//
// The program's operation is held here until its results are in ("parked"); what runs through the
// plan is a runtime-owned copy of its input (Accept), so the program may overwrite or reuse its
// buffers as soon as its handle completes, and an in-place allreduce is fine.
//
// Memory (held_bytes(), reported in Stats().delayed_bytes): one copy of each submission until its
// buckets have run, one residual per bucket with period > 1, and each communicating pass's
// result until every tensor in the bucket has taken it (at most ceil((d + 1) / p) per bucket).
// Copies pile up as far as the program runs ahead of the plan: its handle of submission k waits
// for pass k - d, and not at all in a pass with nothing due, so up to d + p + 1 copies per tensor
// can be held at once. The copies' buffers are kept for reuse (pooled_bytes(), reported with the
// planned executor's buffers in Stats().plan_buffer_bytes), as many per tensor as were in use at
// once.
//
// A dropped plan (a tensor submitted differently, a rank's patience) hands the parked operations
// back for negotiation, where each is reduced synchronously from its own untouched input; the
// undelivered results and the residuals are discarded, and the log names the tensors (Describe;
// PlannedMode::Unfreeze), as at Shutdown.
//
// Checkpoints (SaveCompressionState, runtime/plan/plan_checkpoint.h): between steps, once every copy
// has run through its buckets and every parked operation is delivered, all that is left is the
// number of passes, the residuals and the results not yet delivered (State). Restored into a
// fresh PlanDelays of the same plan, the plan goes on exactly as it would have.
//
// Devices: a plan's CUDA tensors keep their copies, residuals and held results on the GPU,
// allocated and moved through the BufferOps given at construction (queued on its stream; the
// copies' tensors name that stream, so the bucket runner waits for it before packing). Their
// deliveries are queued there too: the caller completes them once a Fence() of those ops has
// passed, holding TakeReads()' buffers until then. held_bytes() counts both; held_device_bytes()
// the GPU's share. Host tensors' work runs at once on the calling thread, as before.
//
// Threading: the coordinator thread only.
#ifndef OVERLAP_RUNTIME_PLANES_PLAN_DELAYS_H_
#define OVERLAP_RUNTIME_PLANES_PLAN_DELAYS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/buffer_ops.h"
#include "runtime/planes/buffer_pool.h"
#include "runtime/plan/executable_plan.h"
#include "runtime/api/pending_op.h"

namespace overlap {

class PlanDelays {
 public:
  // A delayed plan between steps: every tensor submitted `passes` times, every copy through its
  // buckets, nothing parked.
  struct State {
    int64_t passes = 0;
    std::vector<std::vector<uint8_t>> residuals;  // by bucket, packed; empty: none held
    struct Held {                                 // a result not yet delivered
      int bucket = 0;
      int64_t pass = 0;
      std::vector<uint8_t> values;  // the collective's raw, packed result
    };
    std::vector<Held> results;
  };
  // InvalidArgument naming the bucket when `state` cannot belong to `plan`: a residual or a
  // result of the wrong size, a result of a pass that did not communicate or is already
  // delivered, twice the same result.
  static absl::Status Check(const ExecutablePlan& plan, const State& state);

  // `poke` runs between the pieces of long copies (Executor::Poke); it may be empty. `device`
  // moves the plan's CUDA tensors' state (not owned; null when the plan holds none).
  PlanDelays(std::shared_ptr<const ExecutablePlan> plan, int size, std::function<void()> poke,
             BufferOps* device = nullptr);

  // Bucket `bucket` communicates in pass `pass`.
  bool Due(int bucket, int64_t pass) const;

  // Takes the program's submission of `entry` and parks it; returns the runtime-owned copy that
  // runs through the plan (PendingOp::plan_pass = its pass).
  // On a device: an error (the copy could not be made) leaves `op` with the caller, untouched.
  absl::StatusOr<PendingOp> Accept(int entry, PendingOp& op);

  // The copy from Accept has run through all its buckets (or is dropped): its memory is free.
  void Retire(const PendingOp& copy);

  // Adds bucket `bucket`'s slices of the copies `inputs` (one per slice, null: nothing from this
  // rank, e.g. joined) to its residual, each times its prescale factor.
  // An error only from a CUDA bucket's device ops.
  absl::Status Fold(int bucket, const std::vector<const PendingOp*>& inputs);
  // Adds (and clears) the residual into the packed buffer of a communicating pass; for a CUDA
  // bucket, queued on `ops` (the packing's), ordered after this object's queued work and before
  // its later work.
  absl::Status DrainResidual(int bucket, uint8_t* packed, BufferOps& ops);

  // The reduced, packed values of bucket `bucket` in pass `pass` (the collective's raw result).
  void Store(int bucket, int64_t pass, std::shared_ptr<DeviceMemory> result);

  // Parked operations whose results are all in: their outputs written and has_update set, in
  // submission order per tensor. The caller completes them. A submission whose request differs
  // from the plan's agreed one is never delivered: it waits for the plan to drop it (TakeParked).
  // A device op that could not be queued leaves its error in TakeDeviceError().
  std::vector<PendingOp> TakeDeliverable();
  absl::Status TakeDeviceError() { return std::exchange(device_error_, absl::OkStatus()); }
  // The CUDA results the deliveries queued since the last call read: to be held until a Fence()
  // of the device ops queued after them has passed.
  std::vector<std::shared_ptr<DeviceMemory>> TakeReads() { return std::move(reads_); }

  // The parked operation of `entry`'s submission `pass`, for negotiation (its copy diverged).
  std::optional<PendingOp> TakeParked(int entry, int64_t pass);
  // Every parked operation, for negotiation or failure; clears the rest of the state.
  std::vector<PendingOp> TakeAllParked();

  // This plan's state between steps; FailedPrecondition naming the tensors submitted for the next
  // step (or still waiting for a result) when the plan is not between steps.
  absl::StatusOr<State> Save() const;
  // Continues from `state` (Check()ed); only on a PlanDelays that has not run yet.
  // An error only from moving a CUDA bucket's state to the device.
  absl::Status Restore(State state);

  // Tensors with undelivered results or a non-zero residual: "'a' (2 results, a residual)".
  std::vector<std::string> Describe() const;
  int64_t held_bytes() const { return held_bytes_; }
  int64_t held_device_bytes() const { return held_device_bytes_; }
  // Bytes of the copies' buffers kept for reuse (BufferPool), in use or free.
  int64_t pooled_bytes() const { return copies_.held_bytes(); }
  // Operations parked and not yet delivered.
  size_t parked() const;

 private:
  struct Result {
    std::shared_ptr<DeviceMemory> buffer;  // host memory (delayed buckets run host tensors)
    std::vector<int> waiting;  // the bucket's entries that have not taken it yet
  };
  struct Parked {
    int64_t pass = 0;
    PendingOp op;
    // The submission's request is the plan's agreed one; otherwise it is never delivered into.
    bool matches_plan = true;
  };

  DataType DtypeOf(int bucket) const;
  bool EntryOnDevice(int entry) const;
  // The error of a CUDA tensor's state without device ops.
  absl::Status NoDevice() const;
  bool BucketOnDevice(int bucket) const;
  // Adds `bytes` (negative: frees) to held_bytes_, and to held_device_bytes_ when on the device.
  void Hold(int64_t bytes, bool on_device);
  // Copies device bytes to the host and waits for them (with a deadline).
  absl::Status DeviceToHost(const DeviceMemory& from, std::vector<uint8_t>* to) const;
  // Device memory holding `values` (waited for, so `values` may go).
  std::shared_ptr<DeviceMemory> HostToDevice(const std::vector<uint8_t>& values);
  // Bytes of bucket `bucket`'s packed slices.
  static int64_t PackedBytes(const ExecutablePlan& plan, int bucket);

  const std::shared_ptr<const ExecutablePlan> plan_;
  const int size_;
  const std::function<void()> poke_;
  std::vector<int64_t> submitted_;                   // by entry
  std::vector<std::deque<Parked>> parked_;           // by entry, oldest first
  std::vector<std::vector<int64_t>> slice_offsets_;  // by bucket: each slice's packed offset
  std::vector<std::vector<int>> members_;            // by bucket: distinct entries
  std::vector<std::vector<uint8_t>> residuals_;      // by bucket, allocated on first fold
  std::vector<std::map<int64_t, Result>> results_;   // by bucket, by pass
  int64_t held_bytes_ = 0;
  int64_t held_device_bytes_ = 0;
  BufferPool copies_;  // by entry: Accept's copies, reused step after step
  BufferOps* const device_;
  std::vector<std::shared_ptr<DeviceMemory>> device_residuals_;  // by bucket, CUDA buckets
  std::vector<std::vector<std::shared_ptr<DeviceMemory>>> device_copies_;  // by entry, reused
  std::vector<std::shared_ptr<DeviceMemory>> reads_;                       // see TakeReads
  absl::Status device_error_;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLANES_PLAN_DELAYS_H_
