// The hierarchical allreduce (hierarchical_allreduce.h states the algorithm and why).
#include "collectives/hierarchical_allreduce.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "collectives/mpi_executor.h"
#include "collectives/ring_allgather.h"
#include "collectives/ring_reduce_scatter.h"
#include "collectives/segmented_allreduce.h"

namespace overlap {

absl::StatusOr<std::unique_ptr<HierarchicalAllreduce>> HierarchicalAllreduce::Start(
    const HostComms& comms, const int tags[2], void* buffer, int64_t count, MPI_Datatype type,
    size_t elem_bytes, MPI_Op op) {
  int local_size = 0;
  std::unique_ptr<HierarchicalAllreduce> work(new HierarchicalAllreduce());
  int rc = MPI_Comm_size(comms.local, &local_size);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(comms.local, &work->local_rank_);
  if (rc != MPI_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("hierarchical allreduce: the host communicator: ", MpiErrorString(rc)));
  }
  if (count < 0 || (count + local_size - 1) / local_size > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hierarchical allreduce of ", count, " elements: a shard of it over ", local_size,
        " local ranks is outside what one MPI call can address (0..", INT_MAX, ")"));
  }
  work->comms_ = comms;
  work->tags_[0] = tags[0];
  work->tags_[1] = tags[1];
  work->buffer_ = static_cast<uint8_t*>(buffer);
  work->type_ = type;
  work->elem_bytes_ = elem_bytes;
  work->op_ = op;
  work->counts_.resize(static_cast<size_t>(local_size));
  work->displs_.resize(static_cast<size_t>(local_size));
  int64_t displ = 0;
  for (int l = 0; l < local_size; ++l) {
    const int64_t shard = count / local_size + (l < count % local_size ? 1 : 0);
    work->counts_[static_cast<size_t>(l)] = static_cast<int>(shard);
    work->displs_[static_cast<size_t>(l)] = static_cast<int>(displ);
    displ += shard;
  }
  if (displ > INT_MAX) {
    // The rings address shards by int displacement: a buffer this large stays flat.
    return absl::InvalidArgumentError(absl::StrCat("hierarchical allreduce of ", count,
                                                   " elements: displacements exceed ", INT_MAX));
  }
  // Uninitialised on purpose: phase 1 writes all of it, and zero-filling a large shard costs more
  // than the copy (runtime/buffer_pool.h measured it).
  work->shard_.reset(
      new uint8_t[static_cast<size_t>(work->counts_[work->local_rank_]) * elem_bytes + 1]);
  absl::Status s = work->StartPhase();
  if (!s.ok()) return s;
  return work;
}

HierarchicalAllreduce::~HierarchicalAllreduce() {
  if (phase_ != Phase::kDone && current_ != nullptr) (void)shard_.release();
}

absl::Status HierarchicalAllreduce::StartPhase() {
  current_.reset();
  const std::vector<int> counts = counts_;
  switch (phase_) {
    case Phase::kLocalReduceScatter: {
      absl::StatusOr<std::unique_ptr<RingReduceScatter>> ring = RingReduceScatter::Start(
          comms_.local, tags_[0], buffer_, shard_.get(), counts, type_, elem_bytes_, op_);
      if (!ring.ok()) return ring.status();
      current_ = std::move(*ring);
      return absl::OkStatus();
    }
    case Phase::kCrossAllreduce: {
      absl::StatusOr<std::unique_ptr<SegmentedAllreduce>> cross = SegmentedAllreduce::Start(
          comms_.cross, nullptr, shard_.get(), counts_[static_cast<size_t>(local_rank_)], type_,
          elem_bytes_, op_);
      if (!cross.ok()) return cross.status();
      current_ = std::move(*cross);
      return absl::OkStatus();
    }
    case Phase::kLocalAllgather: {
      absl::StatusOr<std::unique_ptr<RingAllgather>> ring = RingAllgather::Start(
          comms_.local, tags_[1], shard_.get(), buffer_, counts, displs_, type_, elem_bytes_);
      if (!ring.ok()) return ring.status();
      current_ = std::move(*ring);
      return absl::OkStatus();
    }
    case Phase::kDone:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> HierarchicalAllreduce::Test() {
  while (phase_ != Phase::kDone) {
    absl::StatusOr<bool> done = current_->Test();
    if (!done.ok()) {
      static constexpr const char* kPhaseNames[] = {
          "reduce-scatter within the host", "allreduce across hosts", "allgather within the host"};
      return absl::Status(done.status().code(), absl::StrCat("hierarchical allreduce, ",
                                                             kPhaseNames[static_cast<int>(phase_)],
                                                             ": ", done.status().message()));
    }
    if (!*done) return false;
    phase_ = static_cast<Phase>(static_cast<int>(phase_) + 1);
    absl::Status s = StartPhase();
    if (!s.ok()) return s;
  }
  return true;
}

}  // namespace overlap
