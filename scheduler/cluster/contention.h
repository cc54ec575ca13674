// Contention: how transfers that share a NIC slow each other down.
//
// Our model (arXiv 2002.10105's full text was not available; this is our reading of its
// contention term, documented in docs/cluster-sim.md). A transfer has a solo time: what the job's
// cost model gives when it has the NICs to itself. Alone, it keeps a fraction u (link_utilization)
// of the link busy: u = 1 is a bandwidth-bound ring that fills the link, u < 1 one that leaves
// part of it idle (latency-bound steps, per-layer messages, TCP slow start), which another
// transfer can use. When k transfers share a NIC, the NIC runs them as fluids at equal rates,
// slowed only once their demand k u exceeds the link, and contention wastes a fraction of the
// link on top of that (TCP incast, ring pipelines stalling on each other):
//
//     each transfer progresses at 1 / Slowdown(k) solo-seconds per second,
//     Slowdown(k) = max(1, k u) x (1 + eta x (k - 1)).
//
// With u = 1 (the default) this is k (1 + eta (k - 1)), bit for bit: eta = 0 is ideal processor
// sharing and eta > 0 makes sharing strictly worse in total throughput, so sharing never adds
// throughput. With u < 1, k transfers together may move up to k / Slowdown(k) > 1 solo
// transfers' worth per second. A transfer that crosses several NICs progresses at the rate of
// its most contended one. u changes no solo time: it only says what sharing costs.
#ifndef OVERLAP_SCHEDULER_CLUSTER_CONTENTION_H_
#define OVERLAP_SCHEDULER_CLUSTER_CONTENTION_H_

#include <vector>

#include "absl/status/status.h"

namespace overlap::sched::cluster {

struct ContentionModel {
  double eta = 0.2;
  // u in (0, 1]: the fraction of the link one transfer alone keeps busy.
  double link_utilization = 1.0;

  // max(1, k u) x (1 + eta (k - 1)) for k >= 1; 1 for k <= 1. Never below 1.
  double Slowdown(int k) const;
  // InvalidArgument naming "eta" when it is negative or not finite, or "link_utilization" when
  // it is not in (0, 1].
  absl::Status Validate() const;
};

// AdaDUAL's admission rule. A new transfer of solo time `new_solo_s` finds its NIC running one
// transfer with `running_remaining_s` solo-seconds left. Starting now (two-way sharing, each at
// 1/c with c = Slowdown(2) >= 1) instead of waiting for the running one to end gives the smaller
// sum of the two completion times exactly when
//     c >= 3/2:  new_solo_s x (2c - 2) < running_remaining_s   (always so when u = 1)
//     c <  3/2:  running_remaining_s > 0                        (sharing adds enough throughput
//                                                               that any pair gains)
// (derivation in docs/cluster-sim.md; the tests check it against brute force over both choices,
// for u = 1 and u < 1). Ties wait, so a zero-length remainder never invites contention.
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
