// IterationModel: one training iteration of a job, reduced to the two tasks the cluster
// simulator schedules, and fitted to the job's plan as overlap's simulator runs it.
//
// Per iteration, every worker runs a compute task of compute_ms on its GPU (forward, backward,
// optimizer). The job's all-reduce traffic for that iteration is one transfer of comm_ms
// solo-time over the job's NICs, released release_ms after the last worker started its compute
// (the first bucket's start: communication overlaps backward) and never before the job's
// previous transfer ended (a job drives its channel one collective at a time). A worker's next
// compute task may start once its own compute ended, iteration_ms after it started (a job never
// runs faster than alone), and tail_ms after the transfer ended:
//
//     next start >= max(compute end, compute start + iteration_ms, transfer end + tail_ms)
//
// Alone on the cluster this gives iteration_ms exactly. tail_ms is fitted so that it also
// reproduces sched::Simulate when the communication runs twice as slow (two-way sharing without
// loss): tail_ms = T(2) - release_ms - 2 comm_ms, where T(f) is the simulated iteration with
// every collective f times slower; then max(T(1), release_ms + 2 comm_ms + tail_ms) = T(2).
// Between and beyond those points the model is linear in the slowdown. So slack in the plan
// (communication hidden under compute) absorbs contention before the job slows down, as it would in
// the real schedule, and a plan whose communication spills into the next forward (layer-wise
// updates, DeFT's delays) gets a tail below the optimizer step, or a negative one.
#ifndef OVERLAP_SCHEDULER_CLUSTER_ITERATION_MODEL_H_
#define OVERLAP_SCHEDULER_CLUSTER_ITERATION_MODEL_H_

#include <map>
#include <string>
#include <tuple>

#include "absl/status/statusor.h"
#include "scheduler/cluster/cluster_spec.h"
#include "scheduler/planner.h"
#include "scheduler/profile.h"

namespace overlap::sched::cluster {

struct IterationModel {
  double compute_ms = 0;
  double iteration_ms = 0;  // alone on the cluster
  double release_ms = 0;
  double comm_ms = 0;  // 0: no all-reduce (one worker)
  double tail_ms = 0;
};

// Plans `profile` with `planner` on `cost` (sched::MakePlan), simulates it at the cost and at
// twice the cost, and fits the model above. Errors from planning or simulation are returned with
// the planner and model named.
absl::StatusOr<IterationModel> FitIterationModel(const Profile& profile, const std::string& planner,
                                                 const CostModel& cost,
                                                 const PlannerOptions& options);

// Memoises FitIterationModel for (model, planner, workers, spans servers) on one cluster;
// profiles come from the bundled set. Not thread-safe.
class IterationModelCache {
 public:
  IterationModelCache(ClusterSpec spec, PlannerOptions options) : spec_(spec), options_(options) {}

  // One worker needs no all-reduce: compute only. NotFound for an unknown model.
  absl::StatusOr<IterationModel> Get(const std::string& model, const std::string& planner,
                                     int workers, bool spans_servers);

 private:
  ClusterSpec spec_;
  PlannerOptions options_;
  std::map<std::string, Profile> profiles_;
  std::map<std::tuple<std::string, std::string, int, bool>, IterationModel> models_;
};

}  // namespace overlap::sched::cluster

#endif  // OVERLAP_SCHEDULER_CLUSTER_ITERATION_MODEL_H_
