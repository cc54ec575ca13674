// LinkProbe: measures every rank's link rate, so an allreduce can be shaped around a slow link
// (link_shares.h) from what the network does rather than from what a user configured.
//
// n - 1 rounds; in round k every rank sends `bytes` to rank + k and receives as many from
// rank - k, all at once, after a non-blocking barrier that lines the ranks up. A rank times its
// receive from the barrier, which makes one flow's rate; after the rounds the ranks allgather
// their flows, so every rank holds the same n x n table. A rank's rate is the fastest flow into or
// out of it: a flow runs at the slower of its two ends, so a rank whose every flow is slow has
// the slow link, and one that reached a fast peer quickly has a fast one. With one slow link
// among fast ones this is exact up to noise; with several it is a lower bound that ranks the
// links correctly.
//
// The gather also carries each rank's `wait`: the mean seconds its recent allreduces took from
// start to end (link_shares.h, Stragglers), so that lateness is judged from the same table on
// every rank.
//
// Costs n - 1 rounds of `bytes` (about 35 ms per round for 4 MiB at 1 Gbit/s, 0.1 s in all on 4
// hosts; 0.4 s at 300 Mbit/s). A lateness check (`bytes` 0) runs no rounds and only gathers the
// waits: one allgather of n + 1 doubles per rank, for judging stragglers between rate probes.
// Messages use `tag` on `comm`. Threading: one thread calls Test; like every Work it never blocks.
#ifndef OVERLAP_COLLECTIVES_LINK_PROBE_H_
#define OVERLAP_COLLECTIVES_LINK_PROBE_H_

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/executor.h"

namespace overlap {

class LinkProbe : public Work {
 public:
  // Large enough to outlast a token-bucket shaper's burst: at 1 MiB the namespace cluster's tbf
  // (a burst of 1/100 s of its rate) let equal 1 Gbit/s links read 170-330 MB/s, 4 MiB reads
  // them within 15% of one another.
  static constexpr size_t kDefaultBytes = size_t{4} << 20;

  // `bytes` 0: a lateness check, whose rates() and flows() are empty.
  static absl::StatusOr<std::unique_ptr<LinkProbe>> Start(MPI_Comm comm, int tag,
                                                          size_t bytes = kDefaultBytes,
                                                          double wait = 0);
  ~LinkProbe() override;

  absl::StatusOr<bool> Test() override;

  // Whether it measured rates (bytes > 0), not only the waits.
  bool measures_rates() const { return bytes_ > 0; }
  // Once Test returned true: each rank's rate in bytes/s, by rank, the same on every rank.
  const std::vector<double>& rates() const { return rates_; }
  // Once Test returned true: flows[dst * n + src] = bytes/s of the flow from src to dst (0 on
  // the diagonal), the same on every rank.
  const std::vector<double>& flows() const { return flows_; }
  // Once Test returned true: every rank's `wait`, by rank, the same on every rank.
  const std::vector<double>& waits() const { return waits_; }

 private:
  enum class Phase { kBarrier, kExchange, kGather, kDone };

  LinkProbe() = default;
  absl::Status StartRound();
  absl::Status StartGather();
  void Finish();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int tag_ = 0;
  int rank_ = 0;
  int size_ = 1;
  size_t bytes_ = 0;
  Phase phase_ = Phase::kBarrier;
  int round_ = 1;  // 1..n-1
  absl::Time round_start_;
  bool received_ = false;
  std::unique_ptr<char[]> out_, in_;
  std::unique_ptr<double[]> gathered_;  // the Iallgather's target, n x n
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // receive, send
  // By source: the rate of its flow into this rank; then this rank's wait.
  std::unique_ptr<double[]> my_flows_;
  std::vector<double> flows_;
  std::vector<double> waits_;
  std::vector<double> rates_;
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_LINK_PROBE_H_
