// The cluster simulator: many data-parallel jobs sharing GPUs and NICs, under one placement
// policy and one communication policy.
//
// Discrete events, deterministic (ties broken by the order events were scheduled, jobs by trace
// index). Jobs are placed on arrival (placement.h) and never move. Each iteration of a job is
// the two-task DAG of iteration_model.h: a compute task per worker, each run by its GPU when the
// GPU is free and the task is the best ready one there by the communication policy's order, and
// one transfer over the NICs of the servers the job spans, started when the policy admits it and
// slowed by contention (contention.h) while it shares a NIC. A job on one server all-reduces
// over its server's internal link, which nothing contends for.
#ifndef OVERLAP_SCHEDULER_CLUSTER_CLUSTER_SIM_H_
#define OVERLAP_SCHEDULER_CLUSTER_CLUSTER_SIM_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/cluster/cluster_spec.h"
#include "scheduler/cluster/iteration_model.h"
#include "scheduler/cluster/placement.h"
#include "scheduler/cluster/policies.h"
#include "scheduler/cluster/trace.h"

namespace overlap::sched::cluster {

// The iteration model of `job` once placed; `spans_servers` says whether its GPUs are on more
// than one server. IterationModelCache::Get in production, fixed models in tests.
using IterationModelFn =
    std::function<absl::StatusOr<IterationModel>(const TraceJob& job, bool spans_servers)>;

struct ClusterSimOptions {
  PlacementPolicy placement;
  CommPolicy communication;
  bool record_timeline = false;  // fill ClusterResult::timeline_json
};

struct JobResult {
  std::string id;
  std::vector<int> gpus;  // as placed
  int servers = 0;        // servers spanned
  double arrival_s = 0;
  double finish_s = 0;
  double jct_s = 0;   // finish - arrival
  double solo_s = 0;  // iterations x solo iteration time: the JCT alone on the cluster
};

struct ClusterResult {
  std::vector<JobResult> jobs;  // in trace order
  double avg_jct_s = 0;
  double median_jct_s = 0;       // mean of the two middle values for an even count
  double p95_jct_s = 0;          // nearest rank: the ceil(0.95 n)-th smallest
  double makespan_s = 0;         // last finish - first arrival
  double gpu_util = 0;           // GPU compute time / (GPUs x makespan)
  int64_t transfers = 0;         // inter-server transfers run
  int64_t shared_transfers = 0;  // of those, started on a NIC already carrying one
  int max_nic_sharing = 0;       // most transfers any NIC carried at once
  std::string timeline_json;     // Chrome trace: a track per GPU and per NIC
};

// Runs `trace` to completion. The spec and the jobs are checked first (spec.Validate,
// ValidateJobs against spec.gpus(); model and planner names are `model_fn`'s to check):
// InvalidArgument naming the field, or the job and field, for bad input or an empty trace;
// `model_fn`'s errors are returned with the job named.
absl::StatusOr<ClusterResult> SimulateCluster(const Trace& trace, const ClusterSpec& spec,
                                              const ClusterSimOptions& options,
                                              const IterationModelFn& model_fn);

}  // namespace overlap::sched::cluster

#endif  // OVERLAP_SCHEDULER_CLUSTER_CLUSTER_SIM_H_
