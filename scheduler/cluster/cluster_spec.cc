#include "scheduler/cluster/cluster_spec.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace overlap::sched::cluster {

CostModel ClusterSpec::JobCost(int workers, bool spans_servers) const {
  if (spans_servers) {
    return CostModel::Algorithmic(Algorithm::kRing, workers, nic_latency_us, nic_gbit);
  }
  return CostModel::Algorithmic(Algorithm::kRing, workers, intra_latency_us, intra_gbit);
}

namespace {

absl::Status Positive(const char* field, double value) {
  if (!std::isfinite(value) || value <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": expected a number > 0, got ", value));
  }
  return absl::OkStatus();
}

absl::Status NonNegative(const char* field, double value) {
  if (!std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": expected a number >= 0, got ", value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ClusterSpec::Validate() const {
  if (servers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("servers: expected >= 1, got ", servers));
  }
  if (gpus_per_server < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpus_per_server: expected >= 1, got ", gpus_per_server));
  }
  for (absl::Status s :
       {Positive("nic_gbit", nic_gbit), Positive("intra_gbit", intra_gbit),
        NonNegative("nic_latency_us", nic_latency_us),
        NonNegative("intra_latency_us", intra_latency_us), contention.Validate()}) {
    if (!s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace overlap::sched::cluster
