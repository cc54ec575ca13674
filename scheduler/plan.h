// Plan: the communication schedule of one training iteration, decided once and executed by both
// the runtime and the simulator.
//
// A plan is an ordered list of buckets. A bucket is a list of tensor slices communicated by one
// collective on one channel. Semantics (what the runtime and the simulator both implement):
//  - Each channel runs its buckets one at a time in plan order. Plan order is a cycle that
//    repeats every iteration: in cycle c, bucket b carries the gradients of iteration c - lag.
//    A bucket starts when the channel is free and all its slices' gradients of that iteration are
//    ready (an allgather: when its reduce-scatter, the earlier bucket with the same slices, ended).
//  - delay d: the averaged gradient of iteration k is applied before the forward of iteration
//    k + 1 + d (d = 0 is synchronous SGD). 0 <= lag <= delay <= the plan's staleness bound.
//  - period p, phase f: the bucket communicates only in iterations k with k % p == f; in the
//    others its gradient accumulates locally (error feedback) and nothing is applied.
//  - update: with `layerwise_update` each layer's parameters are updated just before the layer's
//    forward, once its buckets are in (ByteScheduler's and DeAR's semantics); otherwise one
//    optimizer step runs after backward once every due bucket is in (Horovod's and MG-WFBP's).
//  - window says where the planner meant the bucket to run (this backward or the next forward);
//    it documents intent and is shown in traces, it does not constrain execution.
//  - compressor/ratio: the payload is bytes x ratio; "none" has ratio 1.
//  - two_stage: the allreduce runs in two link classes, within each host and then across hosts
//    (cost_model.h, "Two-stage allreduces"), on a channel that offers the form; the same sums.
#ifndef OVERLAP_SCHEDULER_PLAN_H_
#define OVERLAP_SCHEDULER_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/cost_model.h"
#include "scheduler/profile.h"

namespace overlap::sched {

// Elements [offset, offset + count) of tensor `tensor` (index into Profile::tensors).
struct TensorSlice {
  int tensor = 0;
  std::string name;  // the tensor's name, so plans are readable and checkable
  int64_t offset = 0;
  int64_t count = 0;
};

enum class Window { kBackward = 0, kNextForward = 1 };
const char* WindowName(Window window);

struct Bucket {
  std::vector<TensorSlice> slices;
  Collective op = Collective::kAllreduce;
  int channel = 0;
  Window window = Window::kBackward;
  int delay = 0;
  int lag = 0;
  int period = 1;
  int phase = 0;
  std::string compressor = "none";
  double ratio = 1.0;
  bool two_stage = false;
  int64_t bytes = 0;  // uncompressed bytes of all slices (kept consistent by ValidatePlan)
};

struct Plan {
  std::string planner;
  std::string model;
  int staleness = 0;  // the bound the plan was made for
  bool layerwise_update = false;
  double budget_used = 0;  // convergence budget spent (deft), 0 for synchronous plans
  std::vector<Bucket> buckets;

  int MaxDelay() const;
  // Human-readable JSON (one object; buckets as an array). Bytes in names that are not UTF-8
  // print as U+FFFD.
  std::string ToJson() const;
  // Compact, versioned bytes for an MPI broadcast (and a checkpoint).
  std::string Serialize() const;
  // Parses Serialize() output, this version's or the one before (plans of checkpoints written
  // before buckets had a form: every bucket flat). InvalidArgument naming the field and offset for truncated,
  // oversized or out-of-range data; never reads past `bytes`.
  static absl::StatusOr<Plan> Deserialize(absl::string_view bytes);
};

// Checks a plan against the profile and cost model it will run with: channels exist, delays and
// lags within [0, staleness], periods >= 1 with 0 <= phase < period, ratio in (0, 1], slices in
// range with matching names, bucket bytes consistent, two-stage buckets only allreduces on channels
// that offer the form, and every element of every tensor covered
// exactly once by an allreduce, or exactly once by a reduce-scatter and once by a later allgather
// of the same slices. InvalidArgument naming the bucket and the cause.
absl::Status ValidatePlan(const Plan& plan, const Profile& profile, const CostModel& cost);

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_PLAN_H_
