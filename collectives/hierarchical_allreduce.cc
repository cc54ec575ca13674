// The hierarchical allreduce (hierarchical_allreduce.h states the algorithm and why).
#include "collectives/hierarchical_allreduce.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/mpi_executor.h"
#include "collectives/ring_allgather.h"
#include "collectives/ring_reduce_scatter.h"
#include "collectives/segmented_allreduce.h"
#include "collectives/weighted_allreduce.h"

namespace overlap {
namespace {

constexpr const char* kLaneNames[] = {"reduce-scatter within the host", "allreduce across hosts",
                                      "allgather within the host"};

}  // namespace

absl::StatusOr<std::unique_ptr<HierarchicalAllreduce>> HierarchicalAllreduce::Start(
    const HostComms& comms, const int tags[2], void* buffer, int64_t count, MPI_Datatype type,
    size_t elem_bytes, MPI_Op op, absl::Span<const double> cross_shares) {
  int local_size = 0;
  std::unique_ptr<HierarchicalAllreduce> work(new HierarchicalAllreduce());
  int rc = MPI_Comm_size(comms.local, &local_size);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(comms.local, &work->local_rank_);
  if (rc != MPI_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("hierarchical allreduce: the host communicator: ", MpiErrorString(rc)));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("hierarchical allreduce of ", count, " elements"));
  }
  work->comms_ = comms;
  work->tags_[0] = tags[0];
  work->tags_[1] = tags[1];
  work->type_ = type;
  work->elem_bytes_ = elem_bytes;
  work->op_ = op;
  work->cross_shares_.assign(cross_shares.begin(), cross_shares.end());
  const int64_t segment_elems =
      std::max<int64_t>(1, static_cast<int64_t>(SegmentedAllreduce::kSegmentBytes / elem_bytes));
  for (int64_t first = 0;; first += segment_elems) {
    const int64_t n = std::min(segment_elems, count - first);
    Segment segment;
    segment.data = static_cast<uint8_t*>(buffer) + static_cast<size_t>(first) * elem_bytes;
    int displ = 0;
    for (int l = 0; l < local_size; ++l) {
      const int shard = static_cast<int>(n / local_size + (l < n % local_size ? 1 : 0));
      segment.counts.push_back(shard);
      segment.displs.push_back(displ);
      displ += shard;
    }
    work->segments_.push_back(std::move(segment));
    if (first + n >= count) break;  // also ends a count of 0 after its one empty segment
  }
  absl::StatusOr<bool> started = work->Advance(kLocalReduceScatter);
  if (!started.ok()) return started.status();
  return work;
}

HierarchicalAllreduce::~HierarchicalAllreduce() {
  // A phase still in flight may write into its segment's shard (the job is failing): leak the
  // shards of unfinished segments rather than free them under MPI.
  if (finished_[kLocalAllgather] == segments_.size()) return;
  for (size_t s = finished_[kLocalAllgather]; s < segments_.size(); ++s) {
    (void)segments_[s].shard.release();
  }
}

absl::Status HierarchicalAllreduce::StartNext(Lane lane) {
  Segment& s = segments_[next_[lane]];
  const int mine = s.counts[static_cast<size_t>(local_rank_)];
  switch (lane) {
    case kLocalReduceScatter: {
      // Uninitialised on purpose: the ring writes all of it, and zero-filling costs more than the
      // copy (runtime/planes/buffer_pool.h measured it).
      s.shard.reset(new uint8_t[static_cast<size_t>(mine) * elem_bytes_ + 1]);
      absl::StatusOr<std::unique_ptr<RingReduceScatter>> ring = RingReduceScatter::Start(
          comms_.local, tags_[0], s.data, s.shard.get(), s.counts, type_, elem_bytes_, op_);
      if (!ring.ok()) return ring.status();
      current_[lane] = std::move(*ring);
      break;
    }
    case kCrossAllreduce: {
      if (!cross_shares_.empty()) {
        // The cross communicator is this channel's own, and one segment crosses at a time: the
        // local rings' tags are free there.
        absl::StatusOr<std::unique_ptr<WeightedAllreduce>> weighted = WeightedAllreduce::Start(
            comms_.cross, tags_, s.shard.get(), mine, type_, elem_bytes_, op_, cross_shares_);
        if (!weighted.ok()) return weighted.status();
        current_[lane] = std::move(*weighted);
        break;
      }
      absl::StatusOr<std::unique_ptr<SegmentedAllreduce>> cross = SegmentedAllreduce::Start(
          comms_.cross, nullptr, s.shard.get(), mine, type_, elem_bytes_, op_);
      if (!cross.ok()) return cross.status();
      current_[lane] = std::move(*cross);
      break;
    }
    case kLocalAllgather: {
      absl::StatusOr<std::unique_ptr<RingAllgather>> ring = RingAllgather::Start(
          comms_.local, tags_[1], s.shard.get(), s.data, s.counts, s.displs, type_, elem_bytes_);
      if (!ring.ok()) return ring.status();
      current_[lane] = std::move(*ring);
      break;
    }
  }
  ++next_[lane];
  return absl::OkStatus();
}

absl::StatusOr<bool> HierarchicalAllreduce::Advance(Lane lane) {
  bool moved = false;
  if (current_[lane] != nullptr) {
    absl::StatusOr<bool> done = current_[lane]->Test();
    if (!done.ok()) {
      return absl::Status(
          done.status().code(),
          absl::StrCat("hierarchical allreduce, ", kLaneNames[lane], " of segment ",
                       finished_[lane], " of ", segments_.size(), ": ", done.status().message()));
    }
    if (!*done) return false;
    current_[lane].reset();
    if (lane == kLocalAllgather) segments_[finished_[lane]].shard.reset();
    ++finished_[lane];
    moved = true;
  }
  // A lane takes the next segment once the lane before it has finished that segment; the first
  // lane also waits while kSegmentsInFlight segments are unfinished, which bounds the shards held.
  const size_t ready =
      lane == kLocalReduceScatter
          ? std::min(segments_.size(), finished_[kLocalAllgather] + kSegmentsInFlight)
          : finished_[lane - 1];
  if (next_[lane] < ready) {
    absl::Status s = StartNext(lane);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("hierarchical allreduce, starting the ", kLaneNames[lane],
                                       " of segment ", next_[lane], ": ", s.message()));
    }
    moved = true;
  }
  return moved;
}

absl::StatusOr<bool> HierarchicalAllreduce::Test() {
  for (bool moved = true; moved;) {
    moved = false;
    for (Lane lane : {kLocalReduceScatter, kCrossAllreduce, kLocalAllgather}) {
      absl::StatusOr<bool> lane_moved = Advance(lane);
      if (!lane_moved.ok()) return lane_moved.status();
      moved = moved || *lane_moved;
    }
  }
  return finished_[kLocalAllgather] == segments_.size();
}

}  // namespace overlap
