// ClusterSpec: the machines a cluster simulation runs on.
//
// servers x gpus_per_server GPUs. GPU g lives on server g / gpus_per_server. Each server has one
// NIC; a job whose GPUs span several servers all-reduces over the NICs of every server it spans
// (a flat ring: each NIC carries 2(n-1)/n of the gradient bytes, which is what the ring cost
// model charges). A job on one server all-reduces over the server's internal link, which no
// other job's all-reduce shares in this model (PCIe/NVLink contention is not modelled).
#ifndef OVERLAP_SCHEDULER_CLUSTER_CLUSTER_SPEC_H_
#define OVERLAP_SCHEDULER_CLUSTER_CLUSTER_SPEC_H_

#include "absl/status/status.h"
#include "scheduler/cluster/contention.h"
#include "scheduler/cost_model.h"

namespace overlap::sched::cluster {

struct ClusterSpec {
  int servers = 16;
  int gpus_per_server = 4;
  // Inter-server network (per NIC), ring all-reduce.
  double nic_gbit = 10;
  double nic_latency_us = 10;
  // Intra-server link (PCIe 3.0 x16 class), ring all-reduce.
  double intra_gbit = 100;
  double intra_latency_us = 5;
  ContentionModel contention;

  int gpus() const { return servers * gpus_per_server; }
  int ServerOf(int gpu) const { return gpu / gpus_per_server; }

  // The cost model a job of `workers` GPUs sees alone: the NIC ring when it spans more than one
  // server, the intra-server ring otherwise.
  CostModel JobCost(int workers, bool spans_servers) const;

  // InvalidArgument naming the field for non-positive counts or bandwidths, negative latencies,
  // or a bad contention model.
  absl::Status Validate() const;
};

}  // namespace overlap::sched::cluster

#endif  // OVERLAP_SCHEDULER_CLUSTER_CLUSTER_SPEC_H_
