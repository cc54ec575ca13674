// The ring allgather (ring_allgather.h states the algorithm and why).
#include "collectives/ring_allgather.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/mpi_wait.h"

namespace overlap {

absl::StatusOr<std::unique_ptr<RingAllgather>> RingAllgather::Start(
    MPI_Comm comm, int tag, const void* send, void* recv, std::vector<int> counts,
    std::vector<int> displs, MPI_Datatype type, size_t elem_bytes) {
  std::unique_ptr<RingAllgather> ring(new RingAllgather());
  absl::Status s = MpiCheck(MPI_Comm_rank(comm, &ring->rank_), "ring allgather: MPI_Comm_rank");
  if (s.ok()) s = MpiCheck(MPI_Comm_size(comm, &ring->size_), "ring allgather: MPI_Comm_size");
  if (!s.ok()) return s;
  if (counts.size() != static_cast<size_t>(ring->size_) || displs.size() != counts.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ring allgather: ", counts.size(),
                                                   " counts and ", displs.size(),
                                                   " displacements for ", ring->size_, " ranks"));
  }
  ring->comm_ = comm;
  ring->tag_ = tag;
  ring->recv_ = static_cast<uint8_t*>(recv);
  ring->type_ = type;
  ring->elem_bytes_ = elem_bytes;
  ring->counts_ = std::move(counts);
  ring->displs_ = std::move(displs);
  uint8_t* own = ring->At(ring->rank_);
  if (send != own) {
    std::memmove(own, send, static_cast<size_t>(ring->Count(ring->rank_)) * elem_bytes);
  }
  if (ring->size_ == 1) return ring;  // step_ == size_ - 1: done
  s = ring->Post();
  if (!s.ok()) return s;
  return ring;
}

RingAllgather::~RingAllgather() {
  // Abandoned mid-collective (the job is failing): the receive is cancelled; the send reads the
  // caller's buffer, which the caller keeps until its work is gone, so it is only released.
  if (requests_[0] != MPI_REQUEST_NULL) {
    MPI_Cancel(&requests_[0]);
    MPI_Request_free(&requests_[0]);
  }
  if (requests_[1] != MPI_REQUEST_NULL) MPI_Request_free(&requests_[1]);
}

absl::Status RingAllgather::Post() {
  const int to = Chunk(1), from = Chunk(-1);
  const int send_chunk = Chunk(-step_), recv_chunk = Chunk(-step_ - 1);
  absl::Status s = MpiCheck(
      MPI_Irecv(At(recv_chunk), Count(recv_chunk), type_, from, tag_, comm_, &requests_[0]),
      "ring allgather: MPI_Irecv");
  if (!s.ok()) return s;
  return MpiCheck(
      MPI_Isend(At(send_chunk), Count(send_chunk), type_, to, tag_, comm_, &requests_[1]),
      "ring allgather: MPI_Isend");
}

absl::StatusOr<bool> RingAllgather::Test() {
  if (step_ == size_ - 1) return true;
  int done = 0;
  absl::Status s = MpiCheck(MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE),
                            "ring allgather: MPI_Testall");
  if (!s.ok()) return s;
  if (!done) return false;
  ++step_;
  if (step_ == size_ - 1) return true;
  s = Post();
  if (!s.ok()) return s;
  return false;
}

}  // namespace overlap
