// An allreduce of many bytes as consecutive MPI_Iallreduce calls over segments of at most
// kSegmentBytes, one in flight at a time: the next starts from Test() once the last finished.
//
// Why: Open MPI's ring (libnbc) sends a 1/n share of the whole buffer per step, so one 64 MiB
// allreduce on 4 ranks puts 16 MiB on each TCP connection at once. On the 1 Gbit/s namespace
// cluster that ran at 13.0-13.2 ms/MB, in 8 MiB segments at 12.5, the rate the scheduler's
// 4 MiB probe fits (alternating runs of bench/allreduce; docs/benchmarks.md, "The synchronous
// bound"). Segments keep each burst near the size the link sustains, as NCCL's chunked rings do.
// Each segment adds one ring start; at 10 Gbit/s that is an estimated 1% of an 8 MiB segment's
// time, not measured.
//
// Segments reduce disjoint element ranges, so the result is the unsegmented one, bit for bit,
// whichever algorithm MPI picks per call (every rank picks the same one for the same call).
#ifndef OVERLAP_COLLECTIVES_SEGMENTED_ALLREDUCE_H_
#define OVERLAP_COLLECTIVES_SEGMENTED_ALLREDUCE_H_

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "collectives/executor.h"

namespace overlap {

class SegmentedAllreduce : public Work {
 public:
  static constexpr size_t kSegmentBytes = size_t{8} << 20;

  // Starts the first segment. `send` null: in place in `recv`. `elem_size` bytes per element of
  // `type`. Any count (also above INT_MAX) works: each segment's fits one call.
  static absl::StatusOr<std::unique_ptr<SegmentedAllreduce>> Start(MPI_Comm comm, const void* send,
                                                                   void* recv, int64_t count,
                                                                   MPI_Datatype type,
                                                                   size_t elem_size, MPI_Op op);
  ~SegmentedAllreduce() override;

  // True once the last segment finished; starts the next segment when one finishes.
  absl::StatusOr<bool> Test() override;

 private:
  SegmentedAllreduce(MPI_Comm comm, const void* send, void* recv, int64_t count, MPI_Datatype type,
                     size_t elem_size, MPI_Op op);
  absl::Status StartSegment();

  MPI_Comm comm_;
  const char* send_;  // null: in place
  char* recv_;
  int64_t count_;
  MPI_Datatype type_;
  size_t elem_size_;
  MPI_Op op_;
  int64_t segment_elems_;
  int64_t next_ = 0;  // first element of the segment to start next
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_SEGMENTED_ALLREDUCE_H_
