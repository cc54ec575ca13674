#include "scheduler/cluster/trace_gen.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace overlap::sched::cluster {

namespace {

// Uniform in [0, 1) from the top 53 bits.
double Unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

absl::Status Check(const TraceGenOptions& o) {
  if (o.jobs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("jobs: expected >= 1, got ", o.jobs));
  }
  if (o.models.empty()) {
    return absl::InvalidArgumentError("models: expected at least one model");
  }
  if (o.worker_counts.empty() || o.worker_counts.size() != o.worker_weights.size()) {
    return absl::InvalidArgumentError(
        "worker_weights: expected one weight per worker count, and at least one");
  }
  double total = 0;
  for (size_t i = 0; i < o.worker_counts.size(); ++i) {
    if (o.worker_counts[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker_counts: expected >= 1, got ", o.worker_counts[i]));
    }
    if (!std::isfinite(o.worker_weights[i]) || o.worker_weights[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker_weights: expected >= 0, got ", o.worker_weights[i]));
    }
    total += o.worker_weights[i];
  }
  if (total <= 0) {
    return absl::InvalidArgumentError("worker_weights: sum to zero");
  }
  if (o.min_iterations < 1 || o.max_iterations < o.min_iterations) {
    return absl::InvalidArgumentError(absl::StrCat("iterations: expected 1 <= min <= max, got [",
                                                   o.min_iterations, ", ", o.max_iterations, "]"));
  }
  if (!std::isfinite(o.mean_interarrival_s) || o.mean_interarrival_s < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mean_interarrival_s: expected a number >= 0, got ", o.mean_interarrival_s));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Trace> GenerateTrace(const TraceGenOptions& options) {
  absl::Status status = Check(options);
  if (!status.ok()) {
    return status;
  }
  double total_weight = 0;
  for (double w : options.worker_weights) {
    total_weight += w;
  }
  std::mt19937_64 rng(options.seed);
  Trace trace;
  double now = 0;
  for (int i = 0; i < options.jobs; ++i) {
    TraceJob job;
    job.id = absl::StrCat("job", i);
    if (i > 0) {
      now += -options.mean_interarrival_s * std::log1p(-Unit(rng));
    }
    job.arrival_s = now;
    job.model = options.models[static_cast<size_t>(Unit(rng) * options.models.size())];
    double pick = Unit(rng) * total_weight;
    size_t k = 0;
    while (k + 1 < options.worker_counts.size() && pick >= options.worker_weights[k]) {
      pick -= options.worker_weights[k];
      ++k;
    }
    job.workers = options.worker_counts[k];
    const int64_t span = options.max_iterations - options.min_iterations + 1;
    job.iterations =
        options.min_iterations + static_cast<int64_t>(Unit(rng) * static_cast<double>(span));
    trace.jobs.push_back(std::move(job));
  }
  return trace;
}

}  // namespace overlap::sched::cluster
