// An allreduce whose shards follow the ranks' link rates (link_shares.h): a direct reduce-scatter
// (rank i sends shard j of its buffer to rank j, which sums the n contributions) and a direct
// allgather (rank j sends its summed shard to every rank). A slow link gets a small shard or none,
// so it carries about m bytes each way instead of a ring's 2(n - 1)/n m at the ring's pace.
//
// The buffer is cut into segments of kSegmentBytes, each split by the same shares
// (SplitByShares), and the two phases are two lanes that take the segments in order: the
// allgather of segment k runs while segment k + 1 is reduced. At most kSegmentsInFlight segments
// are between the start of their reduce-scatter and the end of their allgather. A slow rank's link
// then carries its sends and its receives at once, but the first segment's reduce-scatter and the
// last one's allgather run alone: k segments take about (k + 1)/k of the bound, hence segments
// smaller than the ring's.
//
// Every shard is summed by its owner in rank order (rank 0's contribution first), and every rank
// receives the owner's bits, so every rank ends with bit-identical results. A rank with no shard
// sends its whole buffer and receives the result. The result lands in place. Messages use the two
// tags given on `comm`: two collectives in flight on one communicator need different tags.
// Abandoned mid-collective (the job is failing), receives are cancelled, sends released to MPI, and
// the scratch of unfinished segments leaked rather than freed under MPI. Threading: one thread calls
// Test.
#ifndef OVERLAP_COLLECTIVES_WEIGHTED_ALLREDUCE_H_
#define OVERLAP_COLLECTIVES_WEIGHTED_ALLREDUCE_H_

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/executor.h"

namespace overlap {

class WeightedAllreduce : public Work {
 public:
  static constexpr int kSegmentsInFlight = 8;
  static constexpr size_t kSegmentBytes = size_t{1} << 20;

  // Starts the first segment on `buffer`, `count` elements of `type` (`elem_bytes` each), reduced
  // with `op`; `shares` holds every rank's fraction (LinkShares), the same on every rank.
  // InvalidArgument when `shares` does not have one entry per rank or `count` is negative.
  static absl::StatusOr<std::unique_ptr<WeightedAllreduce>> Start(
      MPI_Comm comm, const int tags[2], void* buffer, int64_t count, MPI_Datatype type,
      size_t elem_bytes, MPI_Op op, absl::Span<const double> shares);
  ~WeightedAllreduce() override;

  // True once every segment is gathered; starts what can start. Never blocks.
  absl::StatusOr<bool> Test() override;

 private:
  enum Lane { kReduceScatter = 0, kAllgather = 1 };

  struct Segment {
    uint8_t* data = nullptr;  // its place in the caller's buffer
    std::vector<int64_t> counts, displs;  // per rank: its shard, in elements
    // The other ranks' contributions to this rank's shard, one after another by rank (this
    // rank's own slot unused), from the start of the reduce-scatter to its end.
    std::unique_ptr<uint8_t[]> scratch;
  };

  WeightedAllreduce() = default;
  absl::Status StartNext(Lane lane);
  // Sums the contributions to this rank's shard of `s` in rank order, into the buffer.
  absl::Status Reduce(Segment& s);
  absl::StatusOr<bool> Advance(Lane lane);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int tags_[2] = {0, 0};
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  size_t elem_bytes_ = 0;
  MPI_Op op_ = MPI_OP_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<Segment> segments_;
  std::vector<MPI_Request> requests_[2];  // per lane: the messages in flight
  std::vector<bool> receives_[2];         // per lane: which of them are receives
  bool running_[2] = {false, false};
  size_t next_[2] = {0, 0};
  size_t finished_[2] = {0, 0};
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_WEIGHTED_ALLREDUCE_H_
