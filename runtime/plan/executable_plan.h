// ExecutablePlan: the one form in which the planned executor (runtime/planes/planned_mode.h) runs a
// step, whether the plan was observed from negotiation or made by a scheduler planner.
//
// A plan is a cycle of buckets in launch order. A bucket is a list of slices of the plan's
// entries (elements [offset, offset + count) of one agreed tensor) moved by one collective:
//  - kWhole: whole tensors handed to the data plane, which fuses or splits them by dtype, op,
//    compression and size as in negotiated mode (observed plans: DDP-style launch units);
//  - kAllreduce: the slices packed into one buffer and allreduced;
//  - kReduceScatter / kAllgather: DeAR's halves. The reduce-scatter leaves each rank a chunk of
//    the packed slices; the allgather, a later bucket with exactly the same slices, rebuilds the
//    reduced whole.
// A tensor's handle completes when the last bucket holding one of its slices has finished. Sliced
// buckets run one at a time per channel, in plan order; results are copied to the user's buffer
// only when all of a tensor's slices are in, so a tensor sent back to negotiation mid-step still
// holds its own input.
#ifndef OVERLAP_RUNTIME_PLAN_EXECUTABLE_PLAN_H_
#define OVERLAP_RUNTIME_PLAN_EXECUTABLE_PLAN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "runtime/plan/launch_units.h"
#include "scheduler/plan.h"

namespace overlap {

enum class BucketKind { kWhole = 0, kAllreduce = 1, kReduceScatter = 2, kAllgather = 3 };
const char* BucketKindName(BucketKind kind);

struct ExecSlice {
  int entry = 0;       // index into ExecutablePlan::entries
  int64_t offset = 0;  // elements
  int64_t count = 0;
};

struct ExecBucket {
  BucketKind kind = BucketKind::kWhole;
  std::vector<ExecSlice> slices;  // kWhole: one whole-tensor slice per entry
  int channel = 0;                // kWhole: the data plane assigns channels itself
  int reduce_scatter = -1;        // kAllgather: the bucket whose chunks it gathers
  // DeFT's schedule (scheduler/plan.h, runtime/planes/plan_delays.h): the bucket communicates in
  // the passes k with k % period == phase, and its result reaches the program at pass k + delay.
  int delay = 0;
  int period = 1;
  int phase = 0;
  // Error-feedback compression of the packed slices (runtime/planes/compression_stage.h): the
  // canonical spec every tensor of the bucket was agreed with, "none" when uncompressed. The
  // bucket keeps its residual under `compression_key`, made from its slices, so every rank (and a
  // restored plan) finds the same one.
  std::string compression = "none";
  std::string compression_key;
  // The allreduce runs in two link classes, within each host and then across hosts
  // (CollectiveArgs::two_stage; scheduler/plan.h).
  bool two_stage = false;
  bool delayed() const { return delay != 0 || period != 1; }
};

struct ExecutablePlan {
  std::string source;  // "observed", or the planner that made it ("auto:dear")
  // A scheduled plan's sched::Plan (Serialize()), which a checkpoint keeps; empty when observed.
  std::string scheduled;
  bool layerwise_update = false;
  std::vector<PlanEntry> entries;
  std::vector<ExecBucket> buckets;
  // Derived by Index(): for each entry, the buckets holding its slices, in plan order.
  std::vector<std::vector<int>> buckets_of;

  // Fills buckets_of.
  void Index();
  // Some bucket has a delay or an update period: the plan runs with PlanDelays.
  bool delayed() const;
};

// The observed plan: `entries` (one step, in order) in `units` (MakeLaunchUnits, launch_units.h:
// indices into `entries`), each a kWhole bucket.
ExecutablePlan ObservedPlan(std::vector<PlanEntry> entries,
                            const std::vector<std::vector<int>>& units);

// A scheduler plan made for tensors this rank knows as `table` (name -> agreed operation).
// Checks everything a rank must trust before running a plan that came over the wire: every slice
// names a tensor in `table` whose agreed operation is a single-tensor allreduce of
// the profiled dtype with the same element count; slices are in range; every element
// is covered exactly once by an allreduce, or once by a reduce-scatter and once by a later
// allgather of the same slices; a bucket's slices share one dtype and reduction; channels exist. A
// bucket with a compressor (an allreduce; compressors that combine by allreduce: fp16, bf16,
// randomk, covap, powersgd) holds only tensors agreed with one compression spec of that
// compressor, which it runs with; the other buckets hold uncompressed tensors. A bucket with a
// delay or an update period must be an allreduce of float32 or float64 tensors with a sum or an
// average (its off-period steps are kept in a residual), with delay 0..16 and period 1..64, and
// hold only tensors submitted with AllreduceOptions::plan_may_delay. A bucket holding both host and
// CUDA tensors becomes two buckets, one per device, in that order (a reduce-scatter and its
// all-gather alike), since a bucket runs on one device's buffers and executor. InvalidArgument
// naming the bucket and the cause.
absl::StatusOr<ExecutablePlan> ScheduledPlan(
    const sched::Plan& plan, const absl::flat_hash_map<std::string, PlanEntry>& table,
    int num_channels);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLAN_EXECUTABLE_PLAN_H_
