// The ring reduce-scatter (ring_reduce_scatter.h states the algorithm and why).
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
  absl::Status s = ring->Init(comm, tag, type);
  if (!s.ok()) return s;
  if (counts.size() != static_cast<size_t>(ring->size_)) {
    return absl::InvalidArgumentError(absl::StrCat("ring reduce-scatter: ", counts.size(),
                                                   " counts for ", ring->size_, " ranks"));
  }
  ring->send_ = static_cast<const uint8_t*>(send);
  ring->recv_ = static_cast<uint8_t*>(recv);
  ring->elem_bytes_ = elem_bytes;
  ring->op_ = op;
  ring->displs_.assign(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) {
    ring->displs_[i] = ring->displs_[i - 1] + counts[i - 1];
  }
  ring->counts_ = std::move(counts);
  if (ring->size_ == 1) {
    if (ring->Count(0) > 0) {  // an empty buffer may come with null pointers
      std::memcpy(ring->recv_, ring->Input(0), static_cast<size_t>(ring->Count(0)) * elem_bytes);
    }
    return ring;  // no steps
  }
  const int largest = *std::max_element(ring->counts_.begin(), ring->counts_.end());
  const size_t bytes = static_cast<size_t>(largest) * elem_bytes;
  if (ring->size_ > 2) ring->partial_[0].resize(bytes);  // 2 ranks receive into `recv` only
  if (ring->size_ > 3) ring->partial_[1].resize(bytes);
  s = ring->Begin();
  if (!s.ok()) return s;
  return ring;
}

RingReduceScatter::~RingReduceScatter() {
  // A send still in flight reads a partial sum (RingSteps releases it for MPI to finish), so the
  // buffers are leaked on purpose rather than freed under it; nothrow, since a destructor must
  // not throw (without memory for the small vector header they are freed after all: the job is
  // failing either way).
  if (!send_pending()) return;
  for (std::vector<uint8_t>& p : partial_) {
    (void)new (std::nothrow) std::vector<uint8_t>(std::move(p));
  }
}

uint8_t* RingReduceScatter::RecvBuffer(int step) {
  return step == size_ - 2 ? recv_ : partial_[step % 2].data();
}

absl::Status RingReduceScatter::Post(int step) {
  const int send_chunk = Chunk(-step - 1), recv_chunk = Chunk(-step - 2);
  const void* out = step == 0 ? Input(send_chunk) : RecvBuffer(step - 1);
  return Exchange(RecvBuffer(step), Count(recv_chunk), out, Count(send_chunk));
}

absl::Status RingReduceScatter::Arrived(int step) {
  // Our own input joins the partial sum that just arrived; the result is sent on next step.
  const int chunk = Chunk(-step - 2);
  return MpiCheck(MPI_Reduce_local(Input(chunk), RecvBuffer(step), Count(chunk), type(), op_),
                  "ring reduce-scatter: MPI_Reduce_local");
}

}  // namespace overlap
