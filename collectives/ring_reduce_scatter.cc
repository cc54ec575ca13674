#include "collectives/ring_reduce_scatter.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/mpi_wait.h"

namespace overlap {

absl::StatusOr<std::unique_ptr<RingReduceScatter>> RingReduceScatter::Start(
    MPI_Comm comm, int tag, const void* send, void* recv, std::vector<int> counts,
    MPI_Datatype type, size_t elem_bytes, MPI_Op op) {
  std::unique_ptr<RingReduceScatter> ring(new RingReduceScatter());
  absl::Status s =
      MpiCheck(MPI_Comm_rank(comm, &ring->rank_), "ring reduce-scatter: MPI_Comm_rank");
  if (s.ok()) s = MpiCheck(MPI_Comm_size(comm, &ring->size_), "ring reduce-scatter: MPI_Comm_size");
  if (!s.ok()) return s;
  if (counts.size() != static_cast<size_t>(ring->size_)) {
    return absl::InvalidArgumentError(absl::StrCat("ring reduce-scatter: ", counts.size(),
                                                   " counts for ", ring->size_, " ranks"));
  }
  ring->comm_ = comm;
  ring->tag_ = tag;
  ring->send_ = static_cast<const uint8_t*>(send);
  ring->recv_ = static_cast<uint8_t*>(recv);
  ring->type_ = type;
  ring->elem_bytes_ = elem_bytes;
  ring->op_ = op;
  ring->displs_.assign(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) {
    ring->displs_[i] = ring->displs_[i - 1] + counts[i - 1];
  }
  ring->counts_ = std::move(counts);
  if (ring->size_ == 1) {
    std::memcpy(ring->recv_, ring->Input(0), static_cast<size_t>(ring->Count(0)) * elem_bytes);
    return ring;  // step_ == size_ - 1: done
  }
  const int largest = *std::max_element(ring->counts_.begin(), ring->counts_.end());
  const size_t bytes = static_cast<size_t>(largest) * elem_bytes;
  if (ring->size_ > 2) ring->partial_[0].resize(bytes);  // 2 ranks receive into `recv` only
  if (ring->size_ > 3) ring->partial_[1].resize(bytes);
  s = ring->Post();
  if (!s.ok()) return s;
  return ring;
}

RingReduceScatter::~RingReduceScatter() {
  if (requests_[0] == MPI_REQUEST_NULL && requests_[1] == MPI_REQUEST_NULL) return;
  // Abandoned mid-collective (the job is failing): the receive is cancelled; a send cannot be,
  // so its buffer is left allocated for MPI rather than freed under it.
  if (requests_[0] != MPI_REQUEST_NULL) {
    MPI_Cancel(&requests_[0]);
    MPI_Request_free(&requests_[0]);
  }
  if (requests_[1] != MPI_REQUEST_NULL) {
    MPI_Request_free(&requests_[1]);
    // Leaked on purpose; nothrow, since a destructor must not throw (without memory for the
    // small vector header, the buffer is freed after all: the job is failing either way).
    for (std::vector<uint8_t>& p : partial_) {
      (void)new (std::nothrow) std::vector<uint8_t>(std::move(p));
    }
  }
}

uint8_t* RingReduceScatter::RecvBuffer(int step) {
  return step == size_ - 2 ? recv_ : partial_[step % 2].data();
}

absl::Status RingReduceScatter::Post() {
  const int to = Chunk(1) /* rank + 1 */, from = Chunk(-1);
  const int send_chunk = Chunk(-step_ - 1), recv_chunk = Chunk(-step_ - 2);
  const void* out = step_ == 0 ? Input(send_chunk) : RecvBuffer(step_ - 1);
  absl::Status s = MpiCheck(
      MPI_Irecv(RecvBuffer(step_), Count(recv_chunk), type_, from, tag_, comm_, &requests_[0]),
      "ring reduce-scatter: MPI_Irecv");
  if (!s.ok()) return s;
  return MpiCheck(MPI_Isend(out, Count(send_chunk), type_, to, tag_, comm_, &requests_[1]),
                  "ring reduce-scatter: MPI_Isend");
}

absl::StatusOr<bool> RingReduceScatter::Test() {
  if (step_ == size_ - 1) return true;
  int done = 0;
  absl::Status s = MpiCheck(MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE),
                            "ring reduce-scatter: MPI_Testall");
  if (!s.ok()) return s;
  if (!done) return false;
  // Our own input joins the partial sum that just arrived; the result is sent on next step.
  const int chunk = Chunk(-step_ - 2);
  s = MpiCheck(MPI_Reduce_local(Input(chunk), RecvBuffer(step_), Count(chunk), type_, op_),
               "ring reduce-scatter: MPI_Reduce_local");
  if (!s.ok()) return s;
  ++step_;
  if (step_ == size_ - 1) return true;
  s = Post();
  if (!s.ok()) return s;
  return false;
}

}  // namespace overlap
