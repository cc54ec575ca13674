// overlap-cluster-sim's argument parsing and run loop, as a library so tests can drive it.
//
// overlap-cluster-sim (--preset paper [--jobs N] [--seed S] | --trace FILE)
//                     [--placement LIST|all] [--communication LIST|all]
//                     [--planner NAME] [--staleness S] [--eta E] [--link-utilization U]
//                     [--servers N] [--gpus-per-server G] [--nic-gbit B] [--intra-gbit B]
//                     [--mean-interarrival-s X] [--min-iterations I] [--max-iterations I]
//                     [--json] [--timeline FILE] [--write-trace FILE]
//
// --preset paper is the paper's setup (16 servers x 4 GPUs, 10 Gbit/s, its job mix; trace_gen.h)
// with N jobs (default 80) from seed S (default 1). The run covers every pair of placement
// (default first-fit, lwf-1, lwf-2, lwf-4) and communication policy (default all four), one line
// each; --json makes each line
//   {"placement":..,"communication":..,"avg_jct_s":..,"median_jct_s":..,"p95_jct_s":..,
//    "makespan_s":..,"gpu_util":..,"jobs":..,"planner":..,"staleness":..,"eta":..,
//    "link_utilization":..,"transfers":..,"shared_transfers":..,"max_nic_sharing":..,"seed":..,
//    "mean_interarrival_s":..}
// (transfers: inter-server all-reduces run; shared_transfers: those started next to another on a
// NIC; seed and mean_interarrival_s only with --preset).
// --eta (default 0.2) and --link-utilization (u in (0, 1], default 1) are the contention model's
// constants (contention.h). --planner (default fusion) plans every job that does not name its
// own; --staleness is passed to the planners (deft uses it). --timeline FILE writes a Chrome
// trace per pair (FILE gets "-<placement>-<communication>" before its extension when there are
// several); --write-trace FILE writes the trace that ran.
#ifndef OVERLAP_SCHEDULER_CLUSTER_CLUSTER_CLI_H_
#define OVERLAP_SCHEDULER_CLUSTER_CLUSTER_CLI_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/cluster/cluster_spec.h"
#include "scheduler/cluster/placement.h"
#include "scheduler/cluster/policies.h"
#include "scheduler/cluster/trace_gen.h"
#include "scheduler/planner.h"

namespace overlap::sched::cluster {

struct ClusterCliOptions {
  std::string preset;      // "paper", or empty with trace_path set
  std::string trace_path;  // exactly one of preset and trace_path is set
  TraceGenOptions generator;
  ClusterSpec spec;
  std::vector<PlacementPolicy> placements;
  std::vector<CommPolicy> communications;
  std::string planner = "fusion";
  PlannerOptions planner_options;
  bool json = false;
  std::string timeline_path;
  std::string write_trace_path;
};

// InvalidArgument naming the flag: unknown flag, missing or malformed value, out of range,
// unknown policy or planner, neither or both of --preset and --trace.
absl::StatusOr<ClusterCliOptions> ParseClusterCliArgs(const std::vector<std::string>& args);

// Builds or loads the trace, validates it (errors name the job and field), then runs every
// policy pair and writes one line each to `out`.
absl::Status RunClusterCli(const ClusterCliOptions& options, std::ostream& out);

const char* ClusterCliUsage();

}  // namespace overlap::sched::cluster

#endif  // OVERLAP_SCHEDULER_CLUSTER_CLUSTER_CLI_H_
