// Planners: pure functions from (profile, cost model, options) to a Plan. No planner keeps state
// between calls, so the runtime and the simulator get the same plan for the same inputs.
#ifndef OVERLAP_SCHEDULER_PLANNER_H_
#define OVERLAP_SCHEDULER_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/cost_model.h"
#include "scheduler/plan.h"
#include "scheduler/profile.h"

namespace overlap::sched {

struct PlannerOptions {
  // Staleness bound S: the largest delay any bucket may get (deft only; the others are
  // synchronous and ignore it).
  int staleness = 0;
  // Convergence budget for deft: the mean number of steps by which a gradient byte reaches the
  // parameters late, sum over buckets of share x (delay + (period - 1) / 2), where share is the
  // bucket's fraction of the gradient bytes (the profile carries no gradient norms, so bytes stand
  // in for the norm share) and a period-p bucket's gradient waits (p - 1) / 2 steps on average.
  // Negative means the default, max(staleness, (max_period - 1) / 2): the mean staleness may
  // reach the larger of the two bounds the user gave. Spent in steps of 1/4 up to 1, then
  // coarser (deft.cc), so that a larger budget never loses a plan a smaller one had.
  double budget = -1;
  // Largest update period deft may assign when a channel's coverage rate exceeds 1 (1 = never).
  int max_period = 1;
  // Horovod fusion: HOROVOD_FUSION_THRESHOLD and HOROVOD_CYCLE_TIME (ms), with Horovod's
  // defaults since v0.21 (128 MiB and 1 ms; before that 64 MiB and 5 ms).
  int64_t fusion_threshold_bytes = int64_t{128} << 20;
  double cycle_time_ms = 1.0;
  // Compression applied to every bucket. Allreduce-combined compressors only (none, fp16, bf16,
  // randomk, covap, powersgd); topk and efsign go through allgather and are not planned yet.
  // compression_ratio = payload bytes / gradient bytes: 0 means the compressor's own (0.5 for
  // fp16 and bf16) or, for the ratio-controlled ones, the ratio that brings one fused collective
  // down to the compute time (DESIGN section 7), clamped to [0.01, 1]. Planners plan against the
  // compressed sizes, so their choices match what the simulator and the runtime will see.
  std::string compressor = "none";
  double compression_ratio = 0;
  // ByteScheduler partition and credit in bytes; 0 = tune by simulation over a grid (the paper
  // tunes them online with Bayesian optimisation).
  int64_t partition_bytes = 0;
  int64_t credit_bytes = 0;
  // Every uncompressed allreduce bucket two-stage wherever its channel offers the form, not only
  // where the cost model finds it cheaper (OVERLAP_TWO_STAGE=on: tests, and a cost model a user
  // does not trust).
  bool two_stage_always = false;
};

// "wfbp", "fusion", "mgwfbp", "bytescheduler", "usbyte", "dear", "deft", "auto".
const std::vector<std::string>& PlannerNames();

// Runs the named planner. InvalidArgument listing the valid names for an unknown name, or
// naming the field for invalid options or cost model. The returned plan passes ValidatePlan, and
// its buckets' forms are set (two-stage where the channel offers it and it pays; the planners
// themselves plan with each allreduce's cheaper form, ChannelCost::Seconds).
absl::StatusOr<Plan> MakePlan(absl::string_view planner, const Profile& profile,
                              const CostModel& cost, const PlannerOptions& options);

// The planners. Each returns a validated plan or the error that prevented one.

// WFBP (wait-free backpropagation; Zhang et al., Poseidon, USENIX ATC 2017; Horovod with fusion
// off): one allreduce per tensor on channel 0, in gradient-ready order, one optimizer step after
// all are in.
absl::StatusOr<Plan> PlanWfbp(const Profile&, const CostModel&, const PlannerOptions&);

// Horovod tensor fusion (Sergeev and Del Balso, 2018): every cycle_time_ms the background thread
// fuses the tensors that became ready, in ready order, into buffers of at most the threshold (a
// larger tensor goes alone). Choice where Horovod is silent about timing: cycles are aligned with
// the start of backward. The simulator launches a bucket when its last tensor is ready, not at
// the next cycle tick, so it is an upper bound on Horovod's speed with these buckets.
absl::StatusOr<Plan> PlanFusion(const Profile&, const CostModel&, const PlannerOptions&);

// MG-WFBP (Shi, Chu and Li, INFOCOM 2019): merge consecutive gradients (in ready order) so that
// the end of the last allreduce, and so the iteration time F + end + U, is minimal. We compute the
// optimal merge with an exact O(n^2) dynamic programme over contiguous groups instead of the
// paper's greedy rule; both reach the optimum under the linear model, and the DP stays optimal
// for any cost that grows with size (ring, tree).
absl::StatusOr<Plan> PlanMgwfbp(const Profile&, const CostModel&, const PlannerOptions&);

// ByteScheduler (Peng et al., SOSP 2019): tensors cut into partitions of partition_bytes; a
// partition's priority is its layer's forward position (front layers first); at most
// credit_bytes are handed to the channel at a time; the next forward overlaps with the remaining
// communication (each layer updated once its partitions are in). The plan order is the order in
// which this priority-and-credit scheduler sends the partitions of one iteration, computed with
// the cost model. Partition and credit are tuned over {0.5, 2, 8, 32} MB x {1, 4} partitions.
absl::StatusOr<Plan> PlanByteScheduler(const Profile&, const CostModel&, const PlannerOptions&);

// US-Byte (Gao, Hu, Boloursaz Mashhadi, Jin, Xiao and Wu, TPDS 2023): ByteScheduler-style
// priority scheduling of tensor blocks whose sizes are unequal. The paper models two phases, the
// overlap of communication with backward and with the next forward, solves the second optimally
// and the first with a heuristic; its full text was not available here, so this is our reading:
// blocks in priority order (front layers first) grow geometrically, min(P0 x g^k, 64 MB), so the
// first blocks of the next forward arrive quickly and later ones amortise latency; one block is
// handed to the channel at a time (the paper's point that a fixed number in flight is not
// optimal); (P0, g) are tuned by simulation over {0.25, 1, 4} MB x {1.1, 1.3, 1.6}.
absl::StatusOr<Plan> PlanUsByte(const Profile&, const CostModel&, const PlannerOptions&);

// DeAR (Zhang et al., ICDCS 2023): each fused bucket's allreduce is decoupled into a
// reduce-scatter launched in backward as soon as the bucket is ready and an all-gather in the
// next forward just before the layers that need it (front layers first). Fusion: buckets of
// consecutive tensors up to a size tuned over {1, 4, 16, 64} MB by simulation (the paper tunes it
// with Bayesian optimisation).
absl::StatusOr<Plan> PlanDear(const Profile&, const CostModel&, const PlannerOptions&);

// DeFT, our formulation (DESIGN section 6; docs/scheduler.md; the paper's full text was not
// available): a multiple-knapsack problem (planners/deft_knapsack.h) whose knapsacks are the
// backward of step t and the forwards of steps t+1 .. t+1+S on each channel, whose items are
// buckets (tensors cut or fused to 0.5-16 MB, the whole model, or MG-WFBP's optimal merge) with
// their communication time as weight, ready time as release and first use as deadline. Small
// instances are solved exactly (branch and bound); large ones by a greedy that spends the
// convergence budget on whichever term binds: update periods (powers of two up to max_period,
// with staggered phases and error feedback) on the busiest channel, or delays for the items
// with the earliest deadlines. Every solution the solvers pass through for each smaller
// staleness, shorter list of periods and budget step is simulated, along with every synchronous
// planner's plan (WFBP, fusion, MG-WFBP, ByteScheduler, US-Byte, DeAR), and the fastest is
// returned. The candidate set only grows with staleness, max_period and budget, so deft is
// monotone in each, and never slower than any synchronous planner. Reports the budget used.
absl::StatusOr<Plan> PlanDeft(const Profile&, const CostModel&, const PlannerOptions&);

// auto: every other planner, simulated; returns the plan with the smallest iteration time (ties
// go to the earlier planner in PlannerNames order, i.e. the simpler one). Its `planner` field
// reads "auto:<winner>".
absl::StatusOr<Plan> PlanAuto(const Profile&, const CostModel&, const PlannerOptions&);

// auto's candidates: every other planner's plan, as MakePlan returns it, with its simulated
// iteration time, fastest first (ties in PlannerNames order, as PlanAuto breaks them); each plan's
// `planner` reads "auto:<name>". Planners that fail are left out; an error only when none made a
// plan. The runtime tries the first few on live steps (OVERLAP_AUTO_TRIALS).
struct RankedPlan {
  Plan plan;
  double simulated_ms = 0;
};
absl::StatusOr<std::vector<RankedPlan>> RankPlans(const Profile& profile, const CostModel& cost,
                                                  const PlannerOptions& options);

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_PLANNER_H_
