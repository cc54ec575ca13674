// How an allreduce is split among ranks whose links differ, and what each way is predicted to
// cost. Pure functions in a library of their own (//collectives:link_shares), no MPI, so the
// executor, the scheduler's cost model (scheduler/cost_model.h, "Slow links"), the tests and the
// benchmarks share one answer.
//
// The weighted allreduce (weighted_allreduce.h) is a direct reduce-scatter (rank i sends shard j
// of its buffer to rank j, which sums what it gets) and a direct allgather (rank j sends its
// summed shard to every rank). With m bytes, n ranks and shard c_i on rank i, rank i sends
// (m - c_i) + (n - 1) c_i = m + (n - 2) c_i bytes and receives as many, which through a full-duplex
// link of B_i bytes/s takes (m + (n - 2) c_i) / B_i. LinkShares minimises the largest of these
// (water-filling): c_i = max(0, T B_i - m) / (n - 2), T chosen so the shards sum to m.
//  - Equal links give equal shards and a ring's bandwidth time, 2(n - 1)/n m/B.
//  - One link at half rate among 4 gets no shard and takes 2m/B, where a ring takes 3m/B (every
//    ring step waits for the slow link). 2m/B is the bound for any algorithm: the slow rank must
//    send its m bytes and receive the m bytes of the result.
//  - On 2 ranks every split sends m bytes each way; the shares stay equal.
#ifndef OVERLAP_COLLECTIVES_LINK_SHARES_H_
#define OVERLAP_COLLECTIVES_LINK_SHARES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace overlap {

// Each rank's fraction of the buffer (summing to 1) for link rates `rates` (bytes/s, by rank). A
// rate that is not a positive finite number counts as the lowest positive one given (or 1 when
// there is none), so a failed measurement slows a rank's share rather than breaking the split.
// Ranks in `stragglers` get no shard: the others reduce among themselves while they catch up, and
// once one arrives it only sends its buffer and receives the result (StragglAR's idea), m bytes
// each way where a ring would start 2(n - 1)/n m of sequential steps after it.
std::vector<double> LinkShares(absl::Span<const double> rates,
                               absl::Span<const int> stragglers = {});

// A straggler is a rank whose allreduces end much sooner after it starts them than the others'
// do: the others started theirs earlier and waited for it. `waits` holds each rank's mean seconds
// from start to end of its recent allreduces (0: none measured); the ranks whose wait is below
// the median by at least kLateFraction of it and at least kLateMinSeconds, unless all are
// (nothing to compare with).
inline constexpr double kLateFraction = 0.25;
inline constexpr double kLateMinSeconds = 0.002;
std::vector<int> Stragglers(absl::Span<const double> waits);

// `count` elements split by `shares`: each rank gets the floor of its exact part, and the
// elements left over go one each to the ranks with the largest remainders (the lower rank on a
// tie). Sums to `count`; the same on every rank given the same shares.
std::vector<int64_t> SplitByShares(absl::Span<const double> shares, int64_t count);

// Predicted seconds of the bandwidth term (latency ignored) for `bytes` bytes:
//  - the weighted allreduce with `shares`: max over ranks of (m + (n - 2) c_i) / B_i;
//  - a ring, whose every step moves m/n bytes per link and waits for the slowest:
//    2 (n - 1)/n m / min B_i.
double WeightedSeconds(absl::Span<const double> rates, absl::Span<const double> shares,
                       double bytes);
double RingSeconds(absl::Span<const double> rates, double bytes);

// The weighted allreduce replaces the ring only when predicted at most this fraction of the
// ring's time: equal links gain nothing from it (the direct exchange opens n - 1 connections
// where a ring opens one), and a probe taken while training traffic shares the links read equal
// links as up to 1.4x apart on the namespace cluster (docs/benchmarks.md, "Slow links and
// stragglers"); one link at half rate predicts 0.67.
inline constexpr double kWeightedPaysBelow = 0.75;

// Allreduces below this many bytes never run weighted (MpiExecutor::kAdaptiveMinBytes): their
// time is latency, which the weighted allreduce's n - 1 messages per phase do not cut.
inline constexpr size_t kWeightedMinBytes = size_t{1} << 20;

// Whether the weighted allreduce pays for `rates`: at least 3 ranks and predicted under
// kWeightedPaysBelow of a ring.
bool WeightedPays(absl::Span<const double> rates);

// Whether an allreduce of `bytes` pays for leaving `stragglers`, late by `lateness_s`, without a
// shard (LinkShares(rates, stragglers)): predicted to save at least 1 - kWeightedPaysBelow of a
// ring's own time. The ring ends lateness + 2(n - 1)/n m / min B after the others started; the
// weighted allreduce at the later of a straggler's lateness plus its m bytes through its link,
// and the others' larger shares, (m + (n - 2) c_i) / B_i. A straggler late by less than about a
// third of a ring does not pay: the others then carry more than a ring would give them.
bool StragglerPays(absl::Span<const double> rates, absl::Span<const int> stragglers,
                   double lateness_s, double bytes);

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_LINK_SHARES_H_
