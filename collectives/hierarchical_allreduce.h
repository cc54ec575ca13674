// A two-level allreduce for ranks spread over several hosts with several ranks each, as Horovod's
// HOROVOD_HIERARCHICAL_ALLREDUCE and NCCL's tree/ring split run it:
//   1. reduce-scatter among the ranks of one host (the local communicator): local rank l ends
//      with shard l of the buffer, summed over its host;
//   2. allreduce of shard l among the ranks with local rank l, one per host (the cross
//      communicator): the shard is now summed over every rank;
//   3. allgather among the ranks of one host: every rank holds every shard.
//
// Why: only phase 2 leaves the host, L concurrent allreduces of 1/L of the buffer, about 2(H-1)/H
// buffers through each host's NIC whatever the flat algorithm would have done. A flat ring over
// n = H x L ranks crosses hosts on every host boundary of the ring; recursive halving crosses
// them on every step whose partner is on another host, which depends on how ranks are numbered.
// On 2 hosts of 1 Gbit/s (docs/benchmarks.md, "Hierarchical allreduce on two hosts"), for 4-64 MiB
// this was 1.8-2.0x faster than flat with ranks placed round-robin, 2.2-2.7x with 3 ranks per
// host, and level (0.95-1.13x) with 2 consecutive ranks per host, where Open MPI's recursive
// halving already keeps its largest exchange on the host.
//
// The buffer is cut into segments of SegmentedAllreduce::kSegmentBytes, and the three phases are
// three lanes that take the segments in order, one at a time each: segment k's cross-host
// allreduce runs while segment k+1 is reduced on the host and segment k-1 gathered, so the host
// phases hide behind the network instead of adding to it (NCCL pipelines its chunks likewise). At
// most kSegmentsInFlight segments are between phase 1 and the end of phase 3.
//
// Shards within a segment are split as evenly as the count allows (the first count % L get one
// element more). Phases 1 and 3 are the point-to-point rings of ring_reduce_scatter.h and
// ring_allgather.h, so each shard is reduced in a fixed order and every rank ends with
// bit-identical results. The summation order differs from a flat allreduce's, as any two
// allreduce algorithms' do. The result lands in place. Threading: one thread calls Test.
#ifndef OVERLAP_COLLECTIVES_HIERARCHICAL_ALLREDUCE_H_
#define OVERLAP_COLLECTIVES_HIERARCHICAL_ALLREDUCE_H_

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/executor.h"

namespace overlap {

// The two communicators of one channel: `local` holds the ranks of this rank's host, `cross` the
// ranks of every host with this rank's local rank. Every host holds the same number of ranks.
struct HostComms {
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm cross = MPI_COMM_NULL;
};

class HierarchicalAllreduce : public Work {
 public:
  static constexpr int kSegmentsInFlight = 3;

  // Starts the first segment on `buffer`, `count` elements of `type` (`elem_bytes` each),
  // reduced with `op`. `tags` are two message tags for the rings of phases 1 and 3 on
  // `comms.local` (and, weighted, on `comms.cross`), unused by anything else in flight there. Any
  // count works. `cross_shares`, one per host, makes phase 2 a weighted allreduce
  // (weighted_allreduce.h) with those shares; empty, it is a segmented MPI allreduce.
  static absl::StatusOr<std::unique_ptr<HierarchicalAllreduce>> Start(
      const HostComms& comms, const int tags[2], void* buffer, int64_t count, MPI_Datatype type,
      size_t elem_bytes, MPI_Op op, absl::Span<const double> cross_shares = {});
  ~HierarchicalAllreduce() override;

  // True once every segment is gathered; starts what can start. Never blocks.
  absl::StatusOr<bool> Test() override;

 private:
  enum Lane { kLocalReduceScatter = 0, kCrossAllreduce = 1, kLocalAllgather = 2 };

  struct Segment {
    uint8_t* data = nullptr;           // its place in the caller's buffer
    std::vector<int> counts, displs;   // per local rank: its shard, in elements
    std::unique_ptr<uint8_t[]> shard;  // this rank's shard, from phase 1 to the end of phase 3
  };

  HierarchicalAllreduce() = default;
  // Starts segment next_[lane]'s phase `lane`.
  absl::Status StartNext(Lane lane);
  // Advances `lane`: finishes its phase when done, starts the next when it may. True if it moved.
  absl::StatusOr<bool> Advance(Lane lane);

  HostComms comms_;
  int tags_[2] = {0, 0};
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  size_t elem_bytes_ = 0;
  MPI_Op op_ = MPI_OP_NULL;
  std::vector<double> cross_shares_;  // empty: phase 2 is not weighted
  int local_rank_ = 0;
  std::vector<Segment> segments_;
  // Per lane: the phase in flight (null: none), the next segment it takes, and how many it has
  // finished.
  std::unique_ptr<Work> current_[3];
  size_t next_[3] = {0, 0, 0};
  size_t finished_[3] = {0, 0, 0};
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_HIERARCHICAL_ALLREDUCE_H_
