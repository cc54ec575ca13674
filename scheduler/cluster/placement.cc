#include "scheduler/cluster/placement.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace overlap::sched::cluster {

std::string PlacementPolicy::Name() const {
  return kind == Kind::kFirstFit ? "first-fit" : absl::StrCat("lwf-", kappa);
}

absl::StatusOr<PlacementPolicy> ParsePlacement(absl::string_view name) {
  PlacementPolicy policy;
  if (name == "first-fit") {
    return policy;
  }
  int kappa = 0;
  if (absl::StartsWith(name, "lwf-") && absl::SimpleAtoi(name.substr(4), &kappa) && kappa >= 1) {
    policy.kind = PlacementPolicy::Kind::kLwf;
    policy.kappa = kappa;
    return policy;
  }
  return absl::InvalidArgumentError(absl::StrCat("placement: unknown policy '", name,
                                                 "' (expected first-fit or lwf-K with K >= 1)"));
}

namespace {

std::vector<int> FirstFit(int workers, const std::vector<GpuLoad>& gpus) {
  std::vector<int> order(gpus.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return gpus[a].jobs < gpus[b].jobs; });
  order.resize(workers);
  return order;
}

std::vector<int> LeastWorkload(int kappa, int workers, const std::vector<GpuLoad>& gpus,
                               int per_server) {
  const int servers = static_cast<int>(gpus.size()) / per_server;
  std::vector<bool> taken(gpus.size(), false);
  std::vector<int> chosen;
  while (static_cast<int>(chosen.size()) < workers) {
    const int want = std::min(kappa, workers - static_cast<int>(chosen.size()));
    // The group size every candidate server must offer: `want`, or the most any server has
    // left when none has that many (a job larger than the free part of every server).
    int offer = 0;
    for (int s = 0; s < servers; ++s) {
      int left = 0;
      for (int g = s * per_server; g < (s + 1) * per_server; ++g) {
        left += taken[g] ? 0 : 1;
      }
      offer = std::max(offer, std::min(want, left));
    }
    int best_server = -1;
    double best_load = 0;
    std::vector<int> best_group;
    for (int s = 0; s < servers; ++s) {
      std::vector<int> free;
      for (int g = s * per_server; g < (s + 1) * per_server; ++g) {
        if (!taken[g]) {
          free.push_back(g);
        }
      }
      if (static_cast<int>(free.size()) < offer) {
        continue;
      }
      std::stable_sort(free.begin(), free.end(),
                       [&](int a, int b) { return gpus[a].workload_s < gpus[b].workload_s; });
      free.resize(offer);
      double load = 0;
      for (int g : free) {
        load += gpus[g].workload_s;
      }
      if (best_server < 0 || load < best_load) {
        best_server = s;
        best_load = load;
        best_group = free;
      }
    }
    for (int g : best_group) {
      taken[g] = true;
      chosen.push_back(g);
    }
  }
  return chosen;
}

}  // namespace

std::vector<int> Place(const PlacementPolicy& policy, int workers, const std::vector<GpuLoad>& gpus,
                       int gpus_per_server) {
  if (policy.kind == PlacementPolicy::Kind::kFirstFit) {
    return FirstFit(workers, gpus);
  }
  return LeastWorkload(policy.kappa, workers, gpus, gpus_per_server);
}

}  // namespace overlap::sched::cluster
