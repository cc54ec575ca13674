#include "scheduler/cluster/policies.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap::sched::cluster {

const std::vector<std::string>& CommPolicyNames() {
  static const std::vector<std::string> names = {"srsf1", "srsf2", "adadual", "ada-srsf"};
  return names;
}

absl::StatusOr<CommPolicy> ParseCommPolicy(absl::string_view name) {
  using Order = CommPolicy::Order;
  using Admission = CommPolicy::Admission;
  CommPolicy p;
  p.name.assign(name.data(), name.size());
  if (name == "srsf1") {
    p.order = Order::kSrsf;
    p.admission = Admission::kExclusive;
  } else if (name == "srsf2") {
    p.order = Order::kSrsf;
    p.admission = Admission::kPairs;
  } else if (name == "adadual") {
    p.order = Order::kFifo;
    p.admission = Admission::kAdaDual;
  } else if (name == "ada-srsf") {
    p.order = Order::kSrsf;
    p.admission = Admission::kAdaDual;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("communication: unknown policy '", name,
                                                   "' (expected one of ",
                                                   absl::StrJoin(CommPolicyNames(), ", "), ")"));
  }
  return p;
}

bool MayStart(const CommPolicy& policy, double solo_s,
              const std::vector<std::vector<double>>& running, const ContentionModel& model) {
  for (const std::vector<double>& nic : running) {
    switch (policy.admission) {
      case CommPolicy::Admission::kExclusive:
        if (!nic.empty()) {
          return false;
        }
        break;
      case CommPolicy::Admission::kPairs:
        if (nic.size() >= 2) {
          return false;
        }
        break;
      case CommPolicy::Admission::kAdaDual:
        if (nic.size() >= 2 || (nic.size() == 1 && !AdaDualShares(solo_s, nic[0], model))) {
          return false;
        }
        break;
    }
  }
  return true;
}

}  // namespace overlap::sched::cluster
