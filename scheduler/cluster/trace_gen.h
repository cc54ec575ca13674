// A seeded generator of job traces shaped like the paper's (Wang, Shi, Wang and Chu,
// arXiv 2002.10105): a Philly-like mix of GPU counts over a few standard models.
//
// Each job independently draws its model uniformly from `models`, its GPU count from
// `worker_counts` with `worker_weights`, and its iteration count uniformly from
// [min_iterations, max_iterations]. Arrivals are a Poisson process: gaps are exponential with
// mean `mean_interarrival_s`, the first job arrives at 0. Random numbers come from a 64-bit
// Mersenne Twister mapped to doubles by hand (not std::*_distribution, whose output differs
// between standard libraries), so a seed gives the same trace everywhere.
#ifndef OVERLAP_SCHEDULER_CLUSTER_TRACE_GEN_H_
#define OVERLAP_SCHEDULER_CLUSTER_TRACE_GEN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/cluster/trace.h"

namespace overlap::sched::cluster {

struct TraceGenOptions {
  int jobs = 80;
  uint64_t seed = 1;
  // The paper uses VGG-16, ResNet-50, Inception-v3 and LSTM-PTB; overlap bundles no
  // Inception-v3 or LSTM profile, so ResNet-101 and BERT-base stand in (docs/cluster-sim.md).
  std::vector<std::string> models = {"vgg16", "resnet50", "resnet101", "bert-base"};
  // The paper's mix: 50 / 8.75 / 16.25 / 18.75 / 5 / 1.25 % of jobs use 1..32 GPUs.
  std::vector<int> worker_counts = {1, 2, 4, 8, 16, 32};
  std::vector<double> worker_weights = {50, 8.75, 16.25, 18.75, 5, 1.25};
  int64_t min_iterations = 100;
  int64_t max_iterations = 1000;
  double mean_interarrival_s = 5;
};

// InvalidArgument naming the option when counts are < 1, lists are empty or of different
// lengths, weights are negative or sum to zero, or the iteration range is empty.
absl::StatusOr<Trace> GenerateTrace(const TraceGenOptions& options);

}  // namespace overlap::sched::cluster

#endif  // OVERLAP_SCHEDULER_CLUSTER_TRACE_GEN_H_
