// Allreduces that adapt to the links they run on (OVERLAP_ADAPTIVE_ALLREDUCE): the MPI executor
// measures each rank's link (link_probe.h) before its first large allreduce on a channel and
// again as MpiExecutorOptions::reprobe_every says (with cheap lateness checks between while a
// verdict settles), and while the measured rates make a weighted
// allreduce pay (link_shares.h), runs large allreduces as one (weighted_allreduce.h): a slow link gets a
// small shard or none, instead of setting the pace of every ring step. Each rank also times its
// adaptive allreduces from start to end; a rank whose allreduces end much sooner than the others'
// started them late (a straggler), and gets no shard while it stays late, so the others reduce
// among themselves before it arrives.
//
// Every rank starts the same allreduces in the same order on a channel, one at a time (the data
// plane's contract for executors that are not stream-ordered), so the k-th allreduce of a
// channel probes, or runs weighted, on every rank alike; the probe's rates are allgathered, so
// every rank computes the same shares.
#ifndef OVERLAP_COLLECTIVES_LINK_ADAPTATION_H_
#define OVERLAP_COLLECTIVES_LINK_ADAPTATION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/executor.h"
#include "collectives/link_probe.h"

namespace overlap {

enum class LinkAdaptation {
  kOff = 0,   // allreduces run as they always did; no probe
  kAuto = 1,  // probe where links can differ (3 or more hosts, one rank each on the
              // communicator that crosses hosts) and run weighted where that pays
  kOn = 2,    // probe and run weighted whatever the layout and rates (tests, comparisons)
};

const char* LinkAdaptationName(LinkAdaptation adaptation);
// "off", "auto", "on"; InvalidArgument naming the accepted values otherwise.
absl::StatusOr<LinkAdaptation> ParseLinkAdaptation(absl::string_view name);

// What one probe measured and decided, for the runtime's log, timeline and Stats.
struct LinkReport {
  int channel = 0;
  bool cross_host = false;     // probed among one rank per host (hierarchical) or all ranks
  // false for a lateness check (link_probe.h), whose `rates` are the last probe's.
  bool rates_measured = true;
  std::vector<double> rates;   // bytes/s, by rank of the probed communicator
  std::vector<double> shares;  // the weighted allreduce's shares; empty: allreduces run unweighted
  // Each rank's mean seconds from start to end of its allreduces since the last probe (0: none),
  // and the ranks judged late from them (link_shares.h, Stragglers), which get no shard.
  std::vector<double> waits;
  std::vector<int> stragglers;
  double seconds = 0;          // how long the probe took on this rank
  size_t bytes = 0;            // each round's exchange (MpiExecutorOptions::probe_bytes); 0: a check
};

// Counts across executors (the runtime keeps one for all of its own). Any thread reads them.
struct LinkCounters {
  std::atomic<int64_t> probes{0};    // probes run that measured rates (not lateness checks)
  std::atomic<int64_t> weighted{0};  // allreduces that ran weighted
};

// A probe followed by the allreduce it was started for: the probe runs to its end, `decide`
// turns its rates into the allreduce to run (and records them), and that allreduce runs to its
// end. Threading: one thread calls Test.
class ProbedAllreduce : public Work {
 public:
  using Decide = std::function<absl::StatusOr<std::unique_ptr<Work>>(const LinkProbe& probe)>;

  ProbedAllreduce(std::unique_ptr<LinkProbe> probe, Decide decide)
      : probe_(std::move(probe)), decide_(std::move(decide)) {}

  absl::StatusOr<bool> Test() override;

 private:
  std::unique_ptr<LinkProbe> probe_;
  Decide decide_;
  std::unique_ptr<Work> allreduce_;
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_LINK_ADAPTATION_H_
