// Building blocks shared by the planners: gradient-ready order, cutting tensors into pieces,
// turning pieces into buckets, simulating a candidate plan. Internal to scheduler/.
#ifndef OVERLAP_SCHEDULER_PLANNERS_COMMON_H_
#define OVERLAP_SCHEDULER_PLANNERS_COMMON_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/cost_model.h"
#include "scheduler/plan.h"
#include "scheduler/planner.h"
#include "scheduler/profile.h"

namespace overlap::sched::internal {

// Tensor indices by gradient-ready time (ties: later layer first, then later tensor first,
// which is the order autograd produces them).
std::vector<int> ReadyOrder(const Profile& profile);

// A contiguous piece of one tensor, in elements.
struct Piece {
  int tensor = 0;
  int64_t offset = 0;
  int64_t count = 0;
  int64_t bytes = 0;
};

// Cuts `tensor` into pieces of at most max_bytes (rounded down to whole elements, at least one).
std::vector<Piece> CutTensor(const Profile& profile, int tensor, int64_t max_bytes);
std::vector<Piece> WholeTensors(const Profile& profile, const std::vector<int>& order);

// Groups consecutive pieces into fused groups of at most max_bytes (a larger piece alone).
std::vector<std::vector<Piece>> FuseConsecutive(const std::vector<Piece>& pieces,
                                                int64_t max_bytes);

// A bucket holding `pieces` (bytes and names filled in).
Bucket MakeBucket(const Profile& profile, const std::vector<Piece>& pieces, Collective op,
                  int channel, Window window);

// The latest ready time (ms from backward start) and earliest first use (ms from forward
// start) of the pieces' tensors.
double ReadyMs(const Profile& profile, const std::vector<Piece>& pieces);
double FirstUseMs(const Profile& profile, const std::vector<Piece>& pieces);

// Plan skeleton with planner name, model and staleness filled in.
Plan NewPlan(const char* planner, const Profile& profile, int staleness);

// Sets each bucket's two_stage: an uncompressed allreduce on a channel that offers the form runs
// two-stage where that is cheaper (ChannelCost::TwoStagePays), or, with `always`, wherever the
// channel offers it; every other bucket runs flat. Compressed payloads stay flat: their
// compressors combine whole allreduces.
void MarkTwoStage(Plan* plan, const CostModel& cost, bool always);

// Simulated iteration time of `plan` with its buckets' forms as MarkTwoStage would set them
// (planners compare candidates before they are marked), or +inf when it does not validate or
// simulate.
double SimulatedMs(const Profile& profile, const Plan& plan, const CostModel& cost);

// The order in which a priority scheduler with credit sends `buckets` in one iteration: a bucket
// becomes eligible at its ready time; whenever less than `credit_bytes` are queued on the
// channel, the eligible bucket with the smallest priority value is queued next. Returns indices
// into `buckets`; ties in priority go to the earlier ready time, then the lower index. Every
// bucket is costed on channel 0 of `cost`. O(n log n) in the buckets.
std::vector<size_t> PriorityOrder(const Profile& profile, const CostModel& cost,
                                  const std::vector<Bucket>& buckets,
                                  const std::vector<double>& priority, int64_t credit_bytes);

}  // namespace overlap::sched::internal

#endif  // OVERLAP_SCHEDULER_PLANNERS_COMMON_H_
