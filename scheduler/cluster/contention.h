// Contention: how transfers that share a NIC slow each other down.
//
// Our model (arXiv 2002.10105's full text was not available; this is our reading of its
// contention term, documented in docs/cluster-sim.md). A transfer has a solo time: what the job's
// cost model gives when it has the NICs to itself. When k transfers share a NIC, the NIC runs
// them as fluids at equal rates, and contention wastes a fraction of the link on top of the fair
// split (TCP incast, ring pipelines stalling on each other):
//
//     each transfer progresses at 1 / Slowdown(k) solo-seconds per second,
//     Slowdown(k) = k x (1 + eta x (k - 1)).
//
// eta = 0 is ideal processor sharing; eta > 0 makes sharing strictly worse in total throughput,
// which is why avoiding contention (SRSF(1)) and accepting it blindly (SRSF(2)) both lose to an
// adaptive rule. A transfer that crosses several NICs progresses at the rate of its most
// contended one.
#ifndef OVERLAP_SCHEDULER_CLUSTER_CONTENTION_H_
#define OVERLAP_SCHEDULER_CLUSTER_CONTENTION_H_

#include <vector>

#include "absl/status/status.h"

namespace overlap::sched::cluster {

struct ContentionModel {
  double eta = 0.2;

  // k x (1 + eta (k - 1)) for k >= 1; 1 for k <= 1.
  double Slowdown(int k) const;
  // InvalidArgument naming "eta" when it is negative or not finite.
  absl::Status Validate() const;
};

// AdaDUAL's admission rule. A new transfer of solo time `new_solo_s` finds its NIC running one
// transfer with `running_remaining_s` solo-seconds left. Starting now (two-way sharing, each at
// 1/c with c = Slowdown(2)) instead of waiting for the running one to end gives the smaller sum
// of the two completion times exactly when
//     new_solo_s x (2c - 2) < running_remaining_s
// (derivation in docs/cluster-sim.md; the tests check it against brute force over both choices).
// Ties wait, so a zero-length remainder never invites contention.
bool AdaDualShares(double new_solo_s, double running_remaining_s, const ContentionModel& model);

// One transfer on a single NIC, for the brute-force checks and the worked examples: it becomes
// eligible at `start_s` and needs `solo_s` solo-seconds of progress.
struct LinkTransfer {
  double start_s = 0;
  double solo_s = 0;
};

// Completion time of each transfer when all run on one NIC under `model`, each starting at its
// start_s (no admission control). Exact piecewise-linear fluid simulation.
std::vector<double> LinkFinishTimes(const std::vector<LinkTransfer>& transfers,
                                    const ContentionModel& model);

}  // namespace overlap::sched::cluster

#endif  // OVERLAP_SCHEDULER_CLUSTER_CONTENTION_H_
