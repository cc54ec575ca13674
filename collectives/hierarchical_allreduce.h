// A two-level allreduce for ranks spread over several hosts with several ranks each, as Horovod's
// HOROVOD_HIERARCHICAL_ALLREDUCE and NCCL's tree/ring split run it:
//   1. reduce-scatter among the ranks of one host (the local communicator): local rank l ends
//      with shard l of the buffer, summed over its host;
//   2. allreduce of shard l among the ranks with local rank l, one per host (the cross
//      communicator): the shard is now summed over every rank;
//   3. allgather among the ranks of one host: every rank holds every shard.
//
// Why: a flat ring or Rabenseifner's algorithm over n = H x L ranks moves about 2(n-1)/n of the
// buffer through every rank's link, and the L ranks of a host share one NIC, so each host's NIC
// carries about 2L(n-1)/n buffers. Here only phase 2 leaves the host: L concurrent allreduces of
// 1/L of the buffer, 2(H-1)/H buffers per NIC in all. Phases 1 and 3 stay in shared memory. With
// 2 hosts of 2 ranks that is 1 buffer per NIC instead of 3.
//
// The shards are split as evenly as the count allows (the first count % L get one more element).
// Phases 1 and 3 are the point-to-point rings of ring_reduce_scatter.h and ring_allgather.h, so
// each shard is reduced in a fixed order and every rank ends with bit-identical results; phase 2
// is a SegmentedAllreduce (segmented_allreduce.h). The summation order differs from a flat
// allreduce's, as any two allreduce algorithms' do.
//
// The result lands in place. Threading: one thread calls Test.
#ifndef OVERLAP_COLLECTIVES_HIERARCHICAL_ALLREDUCE_H_
#define OVERLAP_COLLECTIVES_HIERARCHICAL_ALLREDUCE_H_

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
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
  // Starts phase 1 on `buffer`, `count` elements of `type` (`elem_bytes` each), reduced with `op`.
  // `tags` are two message tags for the rings of phases 1 and 3 on `comms.local`, unused by
  // anything else in flight there. InvalidArgument when a shard exceeds what one MPI call can
  // address (INT_MAX elements).
  static absl::StatusOr<std::unique_ptr<HierarchicalAllreduce>> Start(const HostComms& comms,
                                                                      const int tags[2],
                                                                      void* buffer, int64_t count,
                                                                      MPI_Datatype type,
                                                                      size_t elem_bytes, MPI_Op op);
  ~HierarchicalAllreduce() override;

  // True once phase 3 finished; starts the next phase when one finishes. Never blocks.
  absl::StatusOr<bool> Test() override;

 private:
  enum class Phase { kLocalReduceScatter, kCrossAllreduce, kLocalAllgather, kDone };

  HierarchicalAllreduce() = default;
  absl::Status StartPhase();

  HostComms comms_;
  int tags_[2] = {0, 0};
  uint8_t* buffer_ = nullptr;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  size_t elem_bytes_ = 0;
  MPI_Op op_ = MPI_OP_NULL;
  int local_rank_ = 0;
  std::vector<int> counts_, displs_;  // per local rank: its shard
  // This rank's shard between phases 1 and 3. Leaked, not freed, if the work is dropped while MPI
  // may still write into it (the job is failing).
  std::unique_ptr<uint8_t[]> shard_;
  Phase phase_ = Phase::kLocalReduceScatter;
  std::unique_ptr<Work> current_;
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_HIERARCHICAL_ALLREDUCE_H_
