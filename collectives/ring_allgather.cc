// The ring allgather (ring_allgather.h states the algorithm and why).
#include "collectives/ring_allgather.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace overlap {

absl::StatusOr<std::unique_ptr<RingAllgather>> RingAllgather::Start(
    MPI_Comm comm, int tag, const void* send, void* recv, std::vector<int> counts,
    std::vector<int> displs, MPI_Datatype type, size_t elem_bytes) {
  std::unique_ptr<RingAllgather> ring(new RingAllgather());
  absl::Status s = ring->Init(comm, tag, type);
  if (!s.ok()) return s;
  if (counts.size() != static_cast<size_t>(ring->size_) || displs.size() != counts.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ring allgather: ", counts.size(),
                                                   " counts and ", displs.size(),
                                                   " displacements for ", ring->size_, " ranks"));
  }
  ring->recv_ = static_cast<uint8_t*>(recv);
  ring->elem_bytes_ = elem_bytes;
  ring->counts_ = std::move(counts);
  ring->displs_ = std::move(displs);
  uint8_t* own = ring->At(ring->rank_);
  // An empty chunk may come with null pointers, which memmove must not be given.
  if (send != own && ring->Count(ring->rank_) > 0) {
    std::memmove(own, send, static_cast<size_t>(ring->Count(ring->rank_)) * elem_bytes);
  }
  s = ring->Begin();
  if (!s.ok()) return s;
  return ring;
}

absl::Status RingAllgather::Post(int step) {
  // The chunk received in step s is the one sent in step s + 1.
  const int send_chunk = Chunk(-step), recv_chunk = Chunk(-step - 1);
  return Exchange(At(recv_chunk), Count(recv_chunk), At(send_chunk), Count(send_chunk));
}

}  // namespace overlap
