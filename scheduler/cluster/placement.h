// Placement: which GPUs a job gets when it arrives.
//
// GPUs are time-shared, as in the paper's DAG model: a job is placed on arrival and keeps its
// GPUs to the end; each GPU runs one compute task at a time, chosen from the ready tasks of the
// jobs placed on it. So placement decides how evenly work is spread and how many servers (and
// NICs) each job's all-reduce crosses.
//
//  - first-fit: GPUs in index order (server-major), the least crowded first: a GPU with fewer
//    unfinished jobs on it comes before one with more, ties by index. On an idle cluster a job
//    gets the first free GPUs, wherever they are.
//  - lwf-K (LWF-kappa, our reading of the paper's least-workload-first): a GPU's workload is the
//    remaining solo service (iterations left x iteration time) of the unfinished jobs on it. The
//    job takes its GPUs in groups of up to K from one server: each time, the server whose K
//    least-loaded free-for-this-job GPUs have the smallest total workload (ties: lower server),
//    so K = 1 balances GPUs with no regard to servers and K = gpus_per_server also consolidates
//    a job onto as few servers as it can.
#ifndef OVERLAP_SCHEDULER_CLUSTER_PLACEMENT_H_
#define OVERLAP_SCHEDULER_CLUSTER_PLACEMENT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap::sched::cluster {

struct PlacementPolicy {
  enum class Kind { kFirstFit, kLwf };
  Kind kind = Kind::kFirstFit;
  int kappa = 1;  // lwf only

  // "first-fit" or "lwf-<kappa>".
  std::string Name() const;
};

// Parses "first-fit" or "lwf-K" with K >= 1 (the placement name in the CLI and the JSON).
// InvalidArgument naming the value otherwise.
absl::StatusOr<PlacementPolicy> ParsePlacement(absl::string_view name);

// What placement knows about a GPU.
struct GpuLoad {
  int jobs = 0;           // unfinished jobs placed on it
  double workload_s = 0;  // their remaining solo service
};

// Picks `workers` distinct GPUs for a new job, in the order chosen. The caller guarantees
// 1 <= workers <= gpus.size() and gpus.size() a multiple of gpus_per_server.
std::vector<int> Place(const PlacementPolicy& policy, int workers, const std::vector<GpuLoad>& gpus,
                       int gpus_per_server);

}  // namespace overlap::sched::cluster

#endif  // OVERLAP_SCHEDULER_CLUSTER_PLACEMENT_H_
