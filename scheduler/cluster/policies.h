// Communication policies: in which order waiting all-reduces (and ready compute tasks) are
// served, and whether a transfer may start on NICs that are already carrying one.
//
//   srsf1     shortest remaining service first; a transfer starts only on idle NICs (the
//             paper's SRSF(1): no contention at all).
//   srsf2     shortest remaining service first; a transfer starts when each of its NICs carries
//             at most one other (SRSF(2): two-way contention accepted blindly).
//   adadual   first come first served; AdaDUAL admission: on a NIC carrying one transfer, the
//             new one starts only if that lowers the pair's total completion time
//             (AdaDualShares), never three-way.
//   ada-srsf  shortest remaining service first with AdaDUAL admission.
//
// A job's remaining service is its remaining iterations x solo iteration time x GPUs. Waiting
// transfers are scanned in priority order each time a NIC's state changes, and every one that
// may start does (a blocked high-priority transfer does not hold NICs for itself).
#ifndef OVERLAP_SCHEDULER_CLUSTER_POLICIES_H_
#define OVERLAP_SCHEDULER_CLUSTER_POLICIES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/cluster/contention.h"

namespace overlap::sched::cluster {

struct CommPolicy {
  enum class Order { kSrsf, kFifo };
  enum class Admission { kExclusive, kPairs, kAdaDual };
  std::string name;
  Order order = Order::kSrsf;
  Admission admission = Admission::kExclusive;
};

// "srsf1", "srsf2", "adadual", "ada-srsf".
const std::vector<std::string>& CommPolicyNames();

// InvalidArgument listing the valid names for anything else.
absl::StatusOr<CommPolicy> ParseCommPolicy(absl::string_view name);

// Whether a transfer of `solo_s` may start now. `running` has one entry per NIC it needs, each
// the remaining solo-seconds of the transfers that NIC carries now.
bool MayStart(const CommPolicy& policy, double solo_s,
              const std::vector<std::vector<double>>& running, const ContentionModel& model);

}  // namespace overlap::sched::cluster

#endif  // OVERLAP_SCHEDULER_CLUSTER_POLICIES_H_
