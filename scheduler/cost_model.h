// CostModel: how long a collective of m bytes takes on each channel (a link the runtime can drive
// concurrently with the others, e.g. intra-node and inter-node).
//
// A channel is either
//  - linear: t = alpha + beta x m for an allreduce, as MG-WFBP and US-Byte model it; a
//    reduce-scatter or an allgather of m bytes has its own fitted line where one was measured
//    (`reduce_scatter`, `allgather`), else it is taken as half an allreduce (alpha/2 +
//    beta/2 x m), or
//  - algorithmic: latency L, bandwidth B and N workers with the closed forms of Thakur,
//    Rabenseifner and Gropp (IJHPCA 2005), reduction compute ignored (n = N, p = ceil(log2 N)):
//        ring:               allreduce 2(n-1)L + 2(n-1)/n m/B;  RS, AG (n-1)L + (n-1)/n m/B
//        recursive doubling: allreduce p(L + m/B);  RS (recursive halving), AG p L + (n-1)/n m/B
//        tree (binomial):    allreduce 2p(L + m/B) (reduce then broadcast);
//                            RS = reduce + scatter = p(L + m/B) + p L + (n-1)/n m/B; AG alike.
//        hierarchical:       N = H hosts x R ranks per host, each host's R ranks sharing one NIC
//                            of bandwidth B (latency L) and reaching each other at intra_latency
//                            Li and intra_bandwidth Bi; the allreduce of the runtime's
//                            OVERLAP_HIERARCHICAL_ALLREDUCE (collectives/hierarchical_allreduce.h)
//                            in k = ceil(m / 8 MiB) pipelined segments of s = m / k bytes:
//                              per segment  RS = (R-1)Li + (R-1)/R s/Bi,  AG = RS,
//                                           X = 2(H-1)L + 2(H-1)/H s/B  (R flows of s/R share B)
//                              allreduce    RS + X + AG + (k-1) max(RS, X, AG);
//                            RS and AG of the whole tensor are flat rings over the N ranks, as
//                            the runtime runs them (a ring's slowest hops are the H NIC ones).
//
// Slow links. A ring or hierarchical channel may give each host's link its own rate
// (host_bandwidth_bytes_per_s(): a ring has one rank per host, so N hosts; hierarchical N / R).
// Rates all equal are the uniform channel at that rate, the closed forms above to the bit.
// Otherwise the allreduce's bandwidth term is what the runtime's MPI executor runs under
// OVERLAP_ADAPTIVE_ALLREDUCE, with the very functions it decides by (collectives/link_shares.h):
//  - the weighted allreduce, WeightedSeconds(rates, LinkShares(rates), m), when adaptive_allreduce
//    is set (auto, the runtime's default), the allreduce has at least kWeightedMinBytes and
//    WeightedPays(rates);
//  - else a ring paced by the slowest link, RingSeconds(rates, m).
// Hierarchical channels apply this to each segment's cross-host phase (s instead of m, the hosts'
// rates), as the runtime weights that phase. The latency terms stay as above: the weighted
// allreduce sends n - 1 messages per phase, as many steps as a ring. Reduce-scatter and allgather
// run as rings whatever the rates (the runtime adapts only allreduces), paced by the slowest link:
// the closed forms above with B = the lowest rate. Not modelled: the link probes (about one
// 4 MiB exchange every 256 allreduces), the two probes the runtime waits for before a verdict
// takes effect, and stragglers (the simulator's hosts compute alike).
// Two-stage allreduces. A bucket of a plan may run its allreduce in two link classes instead of
// one (Bucket::two_stage): a reduce-scatter among the ranks of each host, an allreduce of each
// shard across hosts, an allgather within each host (collectives/hierarchical_allreduce.h, which
// pipelines the three over segments). A channel offers the form when
//  - linear: `two_stage` is set, the line a runtime fits from two-stage probes when its ranks
//    share hosts (runtime/plan/plan_link_cost.cc);
//  - ring: ranks_per_host R > 1 with an intra-host link, hosts N / R >= 2 and no host rates: the
//    flat ring over N ranks, host by host, sends 2(N-1)/N m through each host's link, the
//    two-stage form 2(H-1)/H m (1.75 against 1.5 gradients for 4 hosts of 2), and its cost is the
//    hierarchical closed form above.
// Seconds() of an allreduce is then the cheaper form's (what planners plan with), FormSeconds()
// a given form's (what the simulator charges a bucket), and TwoStagePays() says which is cheaper.
// All times are in seconds here; profiles and plans speak milliseconds.
#ifndef OVERLAP_SCHEDULER_COST_MODEL_H_
#define OVERLAP_SCHEDULER_COST_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace overlap::sched {

enum class Collective { kAllreduce = 0, kReduceScatter = 1, kAllgather = 2 };
enum class Algorithm {
  kLinear = 0,
  kRing = 1,
  kTree = 2,
  kRecursiveDoubling = 3,
  kHierarchical = 4
};

const char* CollectiveName(Collective op);
const char* AlgorithmName(Algorithm algorithm);
// Accepts "linear", "ring", "tree", "rd"/"recursive-doubling", "hierarchical"; InvalidArgument
// otherwise.
absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name);

// One fitted line, t = alpha + beta x bytes; unset while alpha is negative.
struct LinearTerm {
  double alpha_s = -1;
  double beta_s_per_byte = 0;
  bool set() const { return alpha_s >= 0; }
};

// Host link rates and what the runtime would run on them (cost_model.cc).
struct HostLinks;

struct ChannelCost {
  std::string name = "net";
  Algorithm algorithm = Algorithm::kRing;
  double alpha_s = 0;                // linear: fixed cost per allreduce
  double beta_s_per_byte = 0;        // linear: cost per byte of allreduce
  double latency_s = 0;              // algorithmic: per message step
  double bandwidth_bytes_per_s = 0;  // algorithmic: link bandwidth; +inf allowed
  int workers = 2;                   // algorithmic: N
  // hierarchical: ranks per host (R, dividing N) and the links between a host's ranks; ring:
  // the same, where R > 1, offers two-stage allreduces (see "Two-stage allreduces" above).
  int ranks_per_host = 1;
  double intra_latency_s = 0;
  double intra_bandwidth_bytes_per_s = 0;
  // With uneven host rates: whether allreduces run weighted where that pays, as
  // OVERLAP_ADAPTIVE_ALLREDUCE=auto (the runtime's default) does; false: always the ring, as
  // with =off.
  bool adaptive_allreduce = true;
  // linear: measured lines of a reduce-scatter and an allgather of the full tensor size; unset:
  // half an allreduce. A runtime fits them because the two need not cost half an allreduce each
  // (their implementations differ from the allreduce's, and each pays a whole launch).
  LinearTerm reduce_scatter;
  LinearTerm allgather;
  // linear: the fitted line of a two-stage allreduce of the full tensor size; unset: the channel
  // offers no two-stage form.
  LinearTerm two_stage;

  // Seconds for `op` over `bytes` bytes (the full tensor size, not per-rank chunk); an allreduce
  // in the cheaper of its forms where the channel offers two (see "Two-stage allreduces").
  double Seconds(Collective op, double bytes) const;
  // The same in a given form: flat (the one-level collective), or, for an allreduce on a channel
  // that OffersTwoStage(), two-stage.
  double FormSeconds(Collective op, double bytes, bool two_stage) const;
  // Whether allreduces may run two-stage here, and whether one of `bytes` is cheaper so.
  bool OffersTwoStage() const;
  bool TwoStagePays(double bytes) const;
  // The model's own fixed cost (bytes -> 0 limit) of `op`; what infinite bandwidth leaves.
  double LatencySeconds(Collective op) const { return Seconds(op, 0); }
  // ring and hierarchical: each host's link rate in bytes/s, by host (hosts() entries); empty:
  // every link at bandwidth_bytes_per_s. See "Slow links" above.
  const std::vector<double>& host_bandwidth_bytes_per_s() const;
  // Sets them and works out once what the runtime would run on them (the link_shares.h calls sort
  // and allocate, and planners ask for thousands of costs); Validate() checks them.
  void set_host_bandwidth_bytes_per_s(std::vector<double> rates);
  // The hosts whose links host_bandwidth_bytes_per_s lists: N for a ring (one rank per host),
  // N / R for hierarchical; 0 for the other algorithms, which take no host rates.
  int hosts() const;
  // Whether an allreduce of `bytes` runs as the weighted allreduce (see "Slow links" above).
  bool RunsWeighted(double bytes) const;
  // Divides the link bandwidth and every host's rate by `factor` (the intra-host links stay).
  void DivideBandwidth(double factor);

 private:
  // The flat form of `op` (the closed forms and lines above).
  double FlatSeconds(Collective op, double bytes) const;

  // The host rates and the runtime's verdict on them; null: uniform. Never changed once made, so
  // copies of a channel share it, across threads too.
  std::shared_ptr<const HostLinks> host_links_;
};

struct CostModel {
  std::vector<ChannelCost> channels;  // at least one

  // Linear single-channel model: alpha in microseconds, beta in microseconds per MB (1e6 bytes).
  static CostModel Linear(double alpha_us, double beta_us_per_mb);
  // Algorithmic single-channel model: latency in microseconds, bandwidth in Gbit/s (1e9 bit).
  static CostModel Algorithmic(Algorithm algorithm, int workers, double latency_us,
                               double bandwidth_gbit);
  // Hierarchical model: N workers in hosts of `ranks_per_host`; the NIC's latency and bandwidth
  // per host, and the links within a host.
  static CostModel Hierarchical(int workers, int ranks_per_host, double latency_us,
                                double bandwidth_gbit, double intra_latency_us,
                                double intra_bandwidth_gbit);

  // Milliseconds for `op` on channel `channel` (callers pass a valid index).
  double Ms(int channel, Collective op, double bytes) const {
    return 1e3 * channels[channel].Seconds(op, bytes);
  }
  double FormMs(int channel, Collective op, double bytes, bool two_stage) const {
    return 1e3 * channels[channel].FormSeconds(op, bytes, two_stage);
  }
  // A copy with every algorithmic channel set to `workers`; host rates, where given, are kept for
  // the hosts that remain, and hosts added run at bandwidth_bytes_per_s.
  CostModel WithWorkers(int workers) const;
  // InvalidArgument naming the channel and field when a parameter is negative, NaN, or a worker
  // count is < 1, a hierarchical channel's ranks per host do not divide its workers (a ring's,
  // where more than one), or there is no channel; host rates naming the channel and the host when
  // one is not a finite number > 0, their count is not hosts(), or the channel is not a ring or
  // hierarchical, or a ring with more than one rank per host.
  absl::Status Validate() const;
};

// One measured collective: payload bytes and wall seconds.
struct CostSample {
  double bytes = 0;
  double seconds = 0;
};

// Least-squares fit of seconds = alpha + beta x bytes, returned as a linear channel.
// InvalidArgument with fewer than two distinct sizes or non-finite samples. A negative fitted
// alpha (noise at small sizes) is clamped to 0 and beta refitted through the origin, so the
// result is always a usable cost.
absl::StatusOr<ChannelCost> FitLinear(absl::Span<const CostSample> samples);

// The link cost a runtime plans with: FitLinear on `samples`, then two corrections that keep
// the planners from slicing for free.
// - The intercept never falls below `min_alpha_s`, the measured time of the smallest probed
//   collective: a least-squares line through queueing-bent large transfers, or through small
//   collectives timed on the rank that started last (its peers' data was already there), puts it
//   near 0, and the planners then cut hundreds of buckets that each pay the real fixed cost.
//   0 disables the floor.
// - Nor above the fastest sample's time (a larger intercept is the slope bent by queueing);
//   the floor wins where the two disagree.
// Where alpha is moved, beta is refitted through the moved intercept; where noise leaves no
// positive slope, beta is the largest sample's time above alpha per byte.
// - The slope never falls below `min_beta_s_per_byte`, a sustained rate measured by
//   back-to-back collectives: timed on the rank that started last, a training collective looks
//   faster than the link is, since its peers' first chunks were already queued on the wire; a
//   plan that keeps the link busy gets no such head start. 0 disables the floor.
// InvalidArgument as FitLinear.
absl::StatusOr<ChannelCost> FitLinkCost(absl::Span<const CostSample> samples, double min_alpha_s,
                                        double min_beta_s_per_byte = 0);

// Whether `fit`, a link cost fitted earlier, still describes `samples`, allreduces measured since:
// the median over them of measured time / fit's prediction, when it lies within
// [1 / tolerance, tolerance] and there are at least kMinSamplesForHeldFit samples (fewer say
// nothing); nullopt otherwise. A runtime that plans again after its steps changed keeps a fit
// that still holds instead of probing the links again.
inline constexpr size_t kMinSamplesForHeldFit = 3;
std::optional<double> FitStillHolds(absl::Span<const CostSample> samples, const ChannelCost& fit,
                                    double tolerance);

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_COST_MODEL_H_
