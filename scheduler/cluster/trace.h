// Job traces: which training jobs arrive when, and what each one runs.
//
// JSON format (times in seconds; "id" optional, default "job<index>"; "planner" optional,
// default the simulation's planner):
//   {"jobs": [{"id": "a", "arrival_s": 0, "model": "resnet50", "workers": 4,
//              "iterations": 500, "planner": "deft"}]}
// `model` names a profile bundled with overlap (scheduler/builtin.h); `planner` any name
// sched::MakePlan accepts.
#ifndef OVERLAP_SCHEDULER_CLUSTER_TRACE_H_
#define OVERLAP_SCHEDULER_CLUSTER_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap::sched::cluster {

struct TraceJob {
  std::string id;
  double arrival_s = 0;
  std::string model;
  int workers = 1;
  int64_t iterations = 1;
  std::string planner;  // empty: the simulation's default planner
};

struct Trace {
  std::vector<TraceJob> jobs;  // any order; the simulator orders them by arrival, then index

  std::string ToJson() const;
};

// Parses the JSON format above and checks each job on its own (ValidateJob with no cluster).
// InvalidArgument naming `source`, the job (index and id) and the field, e.g.
//   "t.json: jobs[3] (id 'b'): arrival_s: expected a finite number >= 0, got -1".
absl::StatusOr<Trace> ParseTraceJson(absl::string_view text, absl::string_view source = "<string>");

// Reads and parses `path`; NotFound if it cannot be read.
absl::StatusOr<Trace> LoadTraceJson(const std::string& path);

// Checks every job against the cluster: ids unique and non-empty, arrival_s finite and >= 0,
// 1 <= workers <= cluster_gpus, iterations >= 1. InvalidArgument naming `source` (a file name),
// the job and the field.
absl::Status ValidateJobs(const Trace& trace, int cluster_gpus, absl::string_view source = "trace");

// ValidateJobs, and every model in `models` and planner empty or in `planners`.
absl::Status ValidateTrace(const Trace& trace, int cluster_gpus,
                           const std::vector<std::string>& models,
                           const std::vector<std::string>& planners,
                           absl::string_view source = "trace");

}  // namespace overlap::sched::cluster

#endif  // OVERLAP_SCHEDULER_CLUSTER_TRACE_H_
