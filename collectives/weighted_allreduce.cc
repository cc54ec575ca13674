// The weighted allreduce (weighted_allreduce.h states the algorithm and why).
#include "collectives/weighted_allreduce.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectives/link_shares.h"
#include "collectives/mpi_wait.h"

namespace overlap {
namespace {

constexpr const char* kLaneNames[] = {"reduce-scatter", "allgather"};

}  // namespace

absl::StatusOr<std::unique_ptr<WeightedAllreduce>> WeightedAllreduce::Start(
    MPI_Comm comm, const int tags[2], void* buffer, int64_t count, MPI_Datatype type,
    size_t elem_bytes, MPI_Op op, absl::Span<const double> shares) {
  std::unique_ptr<WeightedAllreduce> work(new WeightedAllreduce());
  absl::Status s = MpiCheck(MPI_Comm_rank(comm, &work->rank_), "weighted allreduce: MPI_Comm_rank");
  if (s.ok()) s = MpiCheck(MPI_Comm_size(comm, &work->size_), "weighted allreduce: MPI_Comm_size");
  if (!s.ok()) return s;
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("weighted allreduce of ", count, " elements"));
  }
  if (shares.size() != static_cast<size_t>(work->size_)) {
    return absl::InvalidArgumentError(absl::StrCat("weighted allreduce: ", shares.size(),
                                                   " shares for ", work->size_, " ranks"));
  }
  work->comm_ = comm;
  work->tags_[0] = tags[0];
  work->tags_[1] = tags[1];
  work->type_ = type;
  work->elem_bytes_ = elem_bytes;
  work->op_ = op;
  const int64_t segment_elems =
      std::max<int64_t>(1, static_cast<int64_t>(kSegmentBytes / elem_bytes));
  for (int64_t first = 0; first < count; first += segment_elems) {
    Segment segment;
    segment.data = static_cast<uint8_t*>(buffer) + static_cast<size_t>(first) * elem_bytes;
    segment.counts = SplitByShares(shares, std::min(segment_elems, count - first));
    int64_t displ = 0;
    for (int64_t c : segment.counts) {
      segment.displs.push_back(displ);
      displ += c;
    }
    work->segments_.push_back(std::move(segment));
  }
  absl::StatusOr<bool> started = work->Advance(kReduceScatter);
  if (!started.ok()) return started.status();
  return work;
}

WeightedAllreduce::~WeightedAllreduce() {
  for (int lane = 0; lane < 2; ++lane) {
    for (size_t i = 0; i < requests_[lane].size(); ++i) {
      MPI_Request& r = requests_[lane][i];
      if (r == MPI_REQUEST_NULL) continue;
      // A receive can be cancelled; a send cannot, and is left for MPI to finish.
      if (receives_[lane][i]) MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }
  // A message still in flight may write into a segment's scratch or read from it (the job is
  // failing): leak the scratch of unfinished segments rather than free it under MPI.
  for (size_t s = finished_[kReduceScatter]; s < next_[kReduceScatter]; ++s) {
    (void)segments_[s].scratch.release();
  }
}

absl::Status WeightedAllreduce::StartNext(Lane lane) {
  Segment& s = segments_[next_[lane]];
  const int64_t mine = s.counts[static_cast<size_t>(rank_)];
  std::vector<MPI_Request>& requests = requests_[lane];
  requests.clear();
  receives_[lane].clear();
  const std::string what = absl::StrCat("weighted allreduce ", kLaneNames[lane], ": ");
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const int64_t theirs = s.counts[static_cast<size_t>(peer)];
    uint8_t* their_place = s.data + static_cast<size_t>(s.displs[static_cast<size_t>(peer)]) *
                                        elem_bytes_;
    uint8_t* my_place =
        s.data + static_cast<size_t>(s.displs[static_cast<size_t>(rank_)]) * elem_bytes_;
    // Reduce-scatter: their contribution to my shard in, my part of their shard out.
    // Allgather: their summed shard in, my summed shard out. Empty shards send nothing; both
    // ends know it from the same counts.
    void* into = lane == kReduceScatter
                     ? s.scratch.get() + static_cast<size_t>(peer) * static_cast<size_t>(mine) *
                                             elem_bytes_
                     : static_cast<void*>(their_place);
    const int64_t in_count = lane == kReduceScatter ? mine : theirs;
    const void* from = lane == kReduceScatter ? their_place : my_place;
    const int64_t out_count = lane == kReduceScatter ? theirs : mine;
    if (in_count > 0) {
      requests.push_back(MPI_REQUEST_NULL);
      receives_[lane].push_back(true);
      absl::Status st =
          MpiCheck(MPI_Irecv(into, static_cast<int>(in_count), type_, peer, tags_[lane], comm_,
                             &requests.back()),
                   absl::StrCat(what, "MPI_Irecv from rank ", peer));
      if (!st.ok()) return st;
    }
    if (out_count > 0) {
      requests.push_back(MPI_REQUEST_NULL);
      receives_[lane].push_back(false);
      absl::Status st =
          MpiCheck(MPI_Isend(from, static_cast<int>(out_count), type_, peer, tags_[lane], comm_,
                             &requests.back()),
                   absl::StrCat(what, "MPI_Isend to rank ", peer));
      if (!st.ok()) return st;
    }
  }
  running_[lane] = true;
  ++next_[lane];
  return absl::OkStatus();
}

absl::Status WeightedAllreduce::Reduce(Segment& s) {
  const int64_t mine = s.counts[static_cast<size_t>(rank_)];
  if (mine == 0) return absl::OkStatus();
  const size_t bytes = static_cast<size_t>(mine) * elem_bytes_;
  uint8_t* own = s.data + static_cast<size_t>(s.displs[static_cast<size_t>(rank_)]) * elem_bytes_;
  auto contribution = [&](int q) -> const uint8_t* {
    return q == rank_ ? own : s.scratch.get() + static_cast<size_t>(q) * bytes;
  };
  // The sum starts from rank 0's contribution and adds the others in rank order, so its bits do
  // not depend on which rank owns the shard. MPI_Reduce_local computes inout = in op inout, which
  // for the commutative operations used here is the same value as inout op in.
  uint8_t* acc = rank_ == 0 ? own : s.scratch.get();  // rank 0's slot, or our own place
  for (int q = 1; q < size_; ++q) {
    absl::Status st = MpiCheck(
        MPI_Reduce_local(contribution(q), acc, static_cast<int>(mine), type_, op_),
        "weighted allreduce: MPI_Reduce_local");
    if (!st.ok()) return st;
  }
  if (acc != own) std::memcpy(own, acc, bytes);
  return absl::OkStatus();
}

absl::StatusOr<bool> WeightedAllreduce::Advance(Lane lane) {
  bool moved = false;
  if (running_[lane]) {
    std::vector<MPI_Request>& requests = requests_[lane];
    int done = 0;
    const int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                               MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      return MpiCheck(rc, absl::StrCat("weighted allreduce, ", kLaneNames[lane], " of segment ",
                                       finished_[lane], " of ", segments_.size(),
                                       ": MPI_Testall"));
    }
    if (!done) return false;
    running_[lane] = false;
    Segment& s = segments_[finished_[lane]];
    if (lane == kReduceScatter) {
      absl::Status st = Reduce(s);
      if (!st.ok()) return st;
      s.scratch.reset();
    }
    ++finished_[lane];
    moved = true;
  }
  const size_t ready = lane == kReduceScatter
                           ? std::min(segments_.size(), finished_[kAllgather] + kSegmentsInFlight)
                           : finished_[kReduceScatter];
  if (!running_[lane] && next_[lane] < ready) {
    if (lane == kReduceScatter) {
      Segment& s = segments_[next_[lane]];
      const size_t mine = static_cast<size_t>(s.counts[static_cast<size_t>(rank_)]);
      // Uninitialised on purpose: every slot but our own is received whole.
      s.scratch.reset(new uint8_t[mine * elem_bytes_ * static_cast<size_t>(size_) + 1]);
    }
    absl::Status st = StartNext(lane);
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat("weighted allreduce, starting the ",
                                                  kLaneNames[lane], " of segment ",
                                                  next_[lane], ": ", st.message()));
    }
    moved = true;
  }
  return moved;
}

absl::StatusOr<bool> WeightedAllreduce::Test() {
  for (bool moved = true; moved;) {
    moved = false;
    for (Lane lane : {kReduceScatter, kAllgather}) {
      absl::StatusOr<bool> lane_moved = Advance(lane);
      if (!lane_moved.ok()) return lane_moved.status();
      moved = moved || *lane_moved;
    }
  }
  return finished_[kAllgather] == segments_.size();
}

}  // namespace overlap
