#include "collectives/segmented_allreduce.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/mpi_executor.h"

namespace overlap {

SegmentedAllreduce::SegmentedAllreduce(MPI_Comm comm, const void* send, void* recv, int64_t count,
                                       MPI_Datatype type, size_t elem_size, MPI_Op op)
    : comm_(comm),
      send_(static_cast<const char*>(send)),
      recv_(static_cast<char*>(recv)),
      count_(count),
      type_(type),
      elem_size_(elem_size),
      op_(op),
      segment_elems_(std::max<int64_t>(1, static_cast<int64_t>(kSegmentBytes / elem_size))) {}

SegmentedAllreduce::~SegmentedAllreduce() {
  // A segment still in flight when the work is dropped (the runtime failed) is left to MPI: a
  // non-blocking collective's request may be neither freed nor cancelled (MPI 3.1, 5.12), and
  // Open MPI aborts the process on MPI_Request_free of one before the error reaches the user.
}

absl::StatusOr<std::unique_ptr<SegmentedAllreduce>> SegmentedAllreduce::Start(
    MPI_Comm comm, const void* send, void* recv, int64_t count, MPI_Datatype type, size_t elem_size,
    MPI_Op op) {
  std::unique_ptr<SegmentedAllreduce> work(
      new SegmentedAllreduce(comm, send, recv, count, type, elem_size, op));
  absl::Status s = work->StartSegment();
  if (!s.ok()) return s;
  return work;
}

absl::Status SegmentedAllreduce::StartSegment() {
  const int64_t n = std::min(segment_elems_, count_ - next_);
  const size_t offset = static_cast<size_t>(next_) * elem_size_;
  const void* send = send_ == nullptr ? MPI_IN_PLACE : send_ + offset;
  const int rc =
      StartIallreduce(send, recv_ + offset, static_cast<int>(n), type_, op_, comm_, &request_);
  if (rc != MPI_SUCCESS) {
    return absl::InternalError(absl::StrCat("MPI_Iallreduce of elements ", next_, "..", next_ + n,
                                            " of ", count_, ": ", MpiErrorString(rc)));
  }
  next_ += n;
  return absl::OkStatus();
}

absl::StatusOr<bool> SegmentedAllreduce::Test() {
  int done = 0;
  const int rc = MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return absl::InternalError(MpiErrorString(rc));
  if (!done) return false;
  if (next_ == count_) return true;
  absl::Status s = StartSegment();
  if (!s.ok()) return s;
  return false;
}

}  // namespace overlap
