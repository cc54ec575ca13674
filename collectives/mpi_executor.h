// The CPU executor: MPI non-blocking collectives, one duplicated communicator per channel.
// Allreduces above SegmentedAllreduce::kSegmentBytes run as consecutive segments
// (collectives/segmented_allreduce.h). Every allreduce runs in place: an out-of-place one is
// copied into its output first, since ranks may differ in which they were given and MPI asks for
// MPI_IN_PLACE on all ranks or none (Open MPI picks libnbc's algorithm by it).
// Reduce-scatters of at least kRingReduceScatterBytes run as a ring over point-to-point messages
// (collectives/ring_reduce_scatter.h), the rest as MPI_Ireduce_scatter; allgathers of at least
// kRingAllgatherBytes likewise (collectives/ring_allgather.h), the rest as MPI_Iallgatherv.
//
// With a host layout (MpiExecutorOptions::host), allreduces of at least kHierarchicalMinBytes run
// hierarchically: within each host, across hosts, within each host again
// (collectives/hierarchical_allreduce.h), on two communicators of each channel's own; or, with
// MpiExecutorOptions::hierarchical false, only those whose CollectiveArgs::two_stage asks (a
// plan's two-stage buckets), the rest flat.
//
// With MpiExecutorOptions::adaptation, allreduces of at least kAdaptiveMinBytes adapt to the
// measured link rates (collectives/link_adaptation.h): a probe before the first on each channel
// and every reprobe_every after (with lateness checks between while a verdict settles), and a
// weighted allreduce (collectives/weighted_allreduce.h) while the rates make it pay;
// hierarchical allreduces weight their cross-host phase.
//
// Adasum allreduces run flat, hierarchy or not, as collectives/adasum.h's halving over
// point-to-point messages, one tensor's coefficients per CollectiveArgs::segments entry.
//
// fp16 and bf16 reductions use user-defined MPI operations that accumulate each pairwise step in
// fp32 and round to nearest even (numeric/half.h), so every rank gets bit-identical results.
#ifndef OVERLAP_COLLECTIVES_MPI_EXECUTOR_H_
#define OVERLAP_COLLECTIVES_MPI_EXECUTOR_H_

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collectives/executor.h"
#include "collectives/hierarchical_allreduce.h"
#include "collectives/link_adaptation.h"
#include "collectives/link_shares.h"

namespace overlap {

struct MpiExecutorOptions {
  // Independent communicators; collectives on different channels may be in flight together.
  int num_channels = 1;
  // -1: every allreduce is flat. Otherwise this rank's host, 0..hosts-1: ranks with equal values
  // share a host, and allreduces run hierarchically. Every rank of the communicator must pass -1,
  // or every rank a host (the caller agrees on it: Create splits the communicator only when
  // asked); every host must hold the same number of ranks (InvalidArgument on every rank
  // otherwise).
  int host = -1;
  // With a host: true, every allreduce of at least kHierarchicalMinBytes runs hierarchically
  // (OVERLAP_HIERARCHICAL_ALLREDUCE); false, only those CollectiveArgs::two_stage asks for (a
  // plan's choice, OVERLAP_TWO_STAGE). Every rank passes the same.
  bool hierarchical = true;
  // Allreduces shaped by measured link rates (link_adaptation.h). Every rank passes the same.
  LinkAdaptation adaptation = LinkAdaptation::kOff;
  // Distinct hosts among the communicator's ranks (0: unknown). kAuto adapts only with at least
  // 3, and, when allreduces are flat, one rank per host: ranks sharing a host share its link, and
  // a flat weighted allreduce would send each rank's whole buffer through it.
  int hosts = 0;
  // Eligible allreduces on a channel between two rate probes while the verdicts hold. A verdict
  // not yet settled is checked again kFirstReprobe later: by a full probe when the rate verdict
  // changed (weighting needs two probes in a row that find it pays), else by a lateness check
  // that only gathers the ranks' waits (a lateness verdict is never settled by a probe before
  // which nothing was timed). A first probe that finds equal links so costs one probe, not two or
  // three (0.4 s each at 300 Mbit/s on 4 hosts).
  int64_t reprobe_every = 256;
  // Eligible allreduces on a channel that run before its first probe. 0: the probe precedes the
  // first. An executor that may carry only a job's first few steps (the runtime's negotiated one,
  // before a plan takes over with an executor of its own, which probes) waits, so that a job
  // does not pay for the same links twice; its first probe then judges lateness too. Ignored
  // under LinkAdaptation::kOn, which weights from the first allreduce.
  int64_t first_probe_after = 0;
  // Bytes each rate probe's rounds exchange: at most the allreduce the probe precedes, except the
  // probe that confirms a new verdict, which exchanges all of them.
  size_t probe_bytes = LinkProbe::kDefaultBytes;
  // Called after every probe, on the thread that called Test.
  std::function<void(const LinkReport&)> on_probe;
  // Where probes and weighted allreduces are counted besides the executor's own counters (shared
  // by several executors); may be null. Outlives the executor.
  LinkCounters* counters = nullptr;
};

class MpiExecutor : public Executor {
 public:
  // Duplicates `comm` once per channel (and splits it by host when options.host >= 0). MPI must
  // be initialised; the caller keeps `comm` alive. Collective over `comm`.
  static absl::StatusOr<std::unique_ptr<MpiExecutor>> Create(MPI_Comm comm,
                                                             const MpiExecutorOptions& options);
  static absl::StatusOr<std::unique_ptr<MpiExecutor>> Create(MPI_Comm comm, int num_channels) {
    MpiExecutorOptions options;
    options.num_channels = num_channels;
    return Create(comm, options);
  }
  ~MpiExecutor() override;

  const char* name() const override { return "mpi"; }
  int num_channels() const override { return static_cast<int>(comms_.size()); }
  absl::StatusOr<std::unique_ptr<Work>> Start(int channel, const CollectiveArgs& args) override;
  void Poke() override;

  // Below this the ring's n - 1 message latencies cost more than the libnbc tree's imbalance.
  static constexpr size_t kRingReduceScatterBytes = size_t{64} << 10;
  // Below this (bytes gathered in all) the ring's n - 1 latencies cost more than libnbc's single
  // round of n - 1 concurrent messages.
  static constexpr size_t kRingAllgatherBytes = size_t{64} << 10;
  // Below this a hierarchical allreduce's two local rings add more latency than its smaller
  // cross-host share saves; such allreduces stay flat.
  static constexpr size_t kHierarchicalMinBytes = size_t{64} << 10;

  // Allreduces below this stay as they are under adaptation (link_shares.h says why).
  static constexpr size_t kAdaptiveMinBytes = kWeightedMinBytes;
  static constexpr int64_t kFirstReprobe = 4;

  // Whether the ranks are split by host: two-stage allreduces can run.
  bool splits_by_host() const { return !host_comms_.empty(); }
  // Whether allreduces of at least kHierarchicalMinBytes run hierarchically unasked.
  bool hierarchical() const { return splits_by_host() && options_.hierarchical; }
  bool offers_two_stage() const override { return splits_by_host() && !options_.hierarchical; }
  // Allreduces that ran weighted, and probes run, on every channel so far. Any thread.
  int64_t weighted_allreduces() const { return counters_.weighted.load(); }
  int64_t link_probes() const { return counters_.probes.load(); }

 private:
  MpiExecutor(std::vector<MPI_Comm> comms, const MpiExecutorOptions& options)
      : comms_(std::move(comms)),
        ring_tags_(comms_.size(), 0),
        probe_tags_(comms_.size(), 0),
        options_(options),
        links_(comms_.size()) {
    if (options_.adaptation == LinkAdaptation::kOn) return;
    for (LinkState& link : links_) link.interval = std::max<int64_t>(0, options_.first_probe_after);
  }

  // Per channel: the last probe's verdict and the eligible allreduces since.
  struct LinkState {
    std::vector<double> rates;   // the last probe's, by rank of the probed communicator
    std::vector<double> shares;  // by link rate; empty: allreduces run unweighted
    // The ranks judged late at the last probe, how late (median wait minus theirs, the least of
    // them), and the shares that leave them dry, which an allreduce takes where that pays.
    std::vector<int> stragglers;
    double lateness_s = 0;
    std::vector<double> late_shares;
    // Hysteresis against a noisy probe: the link verdict takes effect once two probes in a row
    // found that weighting pays, and a straggler once two in a row named the same ranks.
    int paying_probes = 0;
    std::vector<int> last_stragglers;
    bool last_paid = false;
    int64_t since_probe = 0;   // eligible allreduces since the last probe or check
    int64_t interval = 0;      // eligible allreduces from the last probe or check to the next
    int64_t since_rates = 0;   // eligible allreduces since the last probe that measured rates,
                               // the one it preceded included
    bool rates_settled = false;  // false: the next check measures rates again
    // Seconds from start to end of the adaptive allreduces since the last probe.
    double wait_sum = 0;
    int64_t waited = 0;
  };
  // Takes a finished probe's rates (a lateness check has none: the last rates stand) and waits
  // into `state`: the verdicts (with their hysteresis), the shares, and when and how to check
  // next.
  void Judge(const LinkProbe& probe, LinkState* state) const;
  // The stragglers' lateness and the shares that leave them dry, from `waits` and state->rates.
  void UpdateLateness(const std::vector<double>& waits, LinkState* state) const;
  // The shares an allreduce of `bytes` on `link` runs with; empty: unweighted.
  const std::vector<double>& SharesFor(const LinkState& link, size_t bytes) const;
  // `work`, timed into the channel's LinkState when it ends.
  absl::StatusOr<std::unique_ptr<Work>> Timed(int channel,
                                              absl::StatusOr<std::unique_ptr<Work>> work);
  // Whether an allreduce of `bytes` with `op` adapts on this executor.
  bool Adapts(size_t bytes, ReduceOp op) const;
  // The adaptive allreduce in place in a.recv on `channel`: a probe first when one is due, then
  // weighted or as before, by the channel's verdict.
  absl::StatusOr<std::unique_ptr<Work>> StartAdaptive(int channel, const CollectiveArgs& a,
                                                      MPI_Op op);
  // The allreduce in place in a.recv as it runs without adaptation, or weighted by `shares`.
  absl::StatusOr<std::unique_ptr<Work>> StartAllreduce(int channel, const CollectiveArgs& a,
                                                       MPI_Op op,
                                                       const std::vector<double>& shares);

  // An Adasum allreduce (collectives/adasum.h) on `channel`, in place in a.recv.
  absl::StatusOr<std::unique_ptr<Work>> StartAdasum(int channel, const CollectiveArgs& a);

  // Splits every channel's communicator into its host and cross-host communicators.
  absl::Status SplitByHost(int host);

  // The next ring's message tag on `channel`: cycles below 32767, the least MPI_TAG_UB the
  // standard allows.
  int NextRingTag(int channel) {
    int& tag = ring_tags_[static_cast<size_t>(channel)];
    tag = tag % 32000 + 1;
    return tag;
  }
  // The next link probe's tag on `channel`, from a range of its own (32001..32700). Probes follow
  // each rank's own verdicts, and where allreduces are hierarchical the two ranks of a host
  // belong to different cross-host groups whose verdicts may differ: a probe tag drawn from the
  // ring sequence would shift one rank's ring tags on the host communicator against its peer's,
  // and their rings would never match (measured: a hang in one run of three, 8 ranks on 4 hosts).
  int NextProbeTag(int channel) {
    int& tag = probe_tags_[static_cast<size_t>(channel)];
    tag = tag % 700 + 1;
    return 32000 + tag;
  }

  std::vector<MPI_Comm> comms_;
  // Per channel, when split by host; else empty.
  std::vector<HostComms> host_comms_;
  // Per channel: rings (reduce-scatters and allgathers) started, which numbers their tags, and
  // link probes started, which number theirs.
  std::vector<int> ring_tags_;
  std::vector<int> probe_tags_;
  const MpiExecutorOptions options_;
  std::vector<LinkState> links_;  // per channel
  LinkCounters counters_;
};

// The MPI datatype that carries `dtype` (fp16/bf16 travel as MPI_UINT16_T).
MPI_Datatype MpiDataType(DataType dtype);

// The MPI operation for `op` on `dtype`: a built-in one, or a user-defined one for fp16/bf16.
// InvalidArgument for kAverage (the runtime scales instead) or an unknown value.
absl::StatusOr<MPI_Op> MpiReduceOp(DataType dtype, ReduceOp op);

// MPI_Iallreduce of `count` elements of `type`, after choosing Open MPI's non-blocking allreduce
// algorithm for its size (latency-optimal for small buffers, bandwidth-optimal for large ones)
// unless the user chose one or the choice was pinned (PinIallreduceAlgorithm); the choice and
// the call are made under one process-wide mutex, as several threads may start Iallreduces.
// Every non-blocking allreduce of the runtime starts here. Returns MPI's code.
int StartIallreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                    MPI_Comm comm, MPI_Request* request);

// The algorithm is one process-wide MPI setting. With several runtimes in a process (process
// sets), coordinator threads start Iallreduces concurrently, and one thread's choice could apply
// to another thread's call: ranks would then run different algorithms for one allreduce
// (MPI_ERR_TRUNCATE). From this call on, every Iallreduce of the process runs Open MPI's own
// choice, which depends on the call alone (its size, and MPI_IN_PLACE, which the executor always
// passes). Waits for a StartIallreduce in progress; idempotent.
// Every rank must pin at the same point of the job.
void PinIallreduceAlgorithm();

// Text for an MPI error code, e.g. "MPI_ERR_COUNT: invalid count argument".
std::string MpiErrorString(int code);

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_MPI_EXECUTOR_H_
