// Loader for PipeDream's per-layer profiles (profiler/*/profiles/*/graph.txt of
// msr-fiddle/pipedream): node lines "nodeN -- <desc> -- forward_compute_time=..,
// backward_compute_time=.., activation_size=.., parameter_size=.." followed by edge lines
// "nodeA -- nodeB". Node order in the file is not execution order, so layers are put in a
// topological order of the edges (ties broken by node number, so the result is deterministic).
#ifndef OVERLAP_SCHEDULER_PIPEDREAM_H_
#define OVERLAP_SCHEDULER_PIPEDREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/profile.h"

namespace overlap::sched {

// One node of a PipeDream graph, as written in the file.
struct PipeDreamNode {
  int id = 0;               // N of "nodeN"
  std::string description;  // e.g. "Conv2d(3, 64, kernel_size=(7, 7), ...)"
  double forward_ms = 0;
  double backward_ms = 0;
  double activation_bytes = 0;
  double parameter_bytes = 0;
};

// Nodes in topological (forward) order. InvalidArgument naming `source`, the line number and the
// cause for malformed lines, duplicate nodes, edges to unknown nodes or a cyclic graph.
absl::StatusOr<std::vector<PipeDreamNode>> ParsePipeDreamGraph(absl::string_view text,
                                                               absl::string_view source);

// Converts a parsed graph into a Profile: one layer per node, one fp32 tensor per node with
// parameters (PipeDream records weight and bias together as parameter_size).
// Input nodes ("Input" description) get forward_ms = 0: their recorded time is data loading
// (635 ms for AlexNet, 474 ms for ResNet-18), not compute, and an input pipeline overlaps it.
// `update_ms` is the optimizer step time to record (PipeDream does not measure it).
absl::StatusOr<Profile> PipeDreamToProfile(const std::vector<PipeDreamNode>& nodes,
                                           absl::string_view model, double update_ms);

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_PIPEDREAM_H_
