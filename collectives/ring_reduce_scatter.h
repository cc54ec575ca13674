// A non-blocking ring reduce-scatter over MPI point-to-point messages.
//
// Why not MPI_Ireduce_scatter: Open MPI's non-blocking collectives (libnbc) implement it as a
// binomial reduce to rank 0 followed by a scatter, with no algorithm to choose. Rank 0's link
// then carries log2(n) whole buffers plus the scatter: on 4 hosts over 1 Gbit/s links a 31 MB
// reduce-scatter took 720 ms where the ring's (n-1)/n of the buffer per link takes 190 ms
// (docs/benchmarks.md). The ring is what NCCL and Gloo run, and what the simulator models.
//
// Rank r owns chunk r (counts[r] elements at the displacement of the counts before it). In step
// s = 0 .. n-2 it sends chunk (r-s-1) mod n, holding s+1 ranks' contributions, to rank r+1 and
// receives chunk (r-s-2) mod n from rank r-1, which it combines with its own input; after n-1
// steps it holds chunk r reduced over every rank. Each chunk is reduced once, on one rank, in a
// fixed order, so results do not depend on timing. The reduction is MPI_Reduce_local with the
// caller's MPI_Op, so user-defined ops (fp16, bf16) work as with MPI's own collectives.
//
// Messages use `tag` on `comm`: two reduce-scatters in flight on one communicator must use
// different tags (the executor numbers them per channel, which every rank does in the same order).
// The steps themselves, and what happens to an abandoned ring, are RingSteps' (ring_steps.h).
// Threading: one thread calls Test.
#ifndef OVERLAP_COLLECTIVES_RING_REDUCE_SCATTER_H_
#define OVERLAP_COLLECTIVES_RING_REDUCE_SCATTER_H_

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/ring_steps.h"

namespace overlap {

class RingReduceScatter : public RingSteps {
 public:
  // Starts the first step. `send` holds sum(counts) elements of `type` (`elem_bytes` each) and is
  // only read; `recv` receives counts[rank] elements. Both stay alive until Test returns true.
  static absl::StatusOr<std::unique_ptr<RingReduceScatter>> Start(MPI_Comm comm, int tag,
                                                                  const void* send, void* recv,
                                                                  std::vector<int> counts,
                                                                  MPI_Datatype type,
                                                                  size_t elem_bytes, MPI_Op op);
  ~RingReduceScatter() override;

 private:
  RingReduceScatter() : RingSteps("ring reduce-scatter") {}
  absl::Status Post(int step) override;
  absl::Status Arrived(int step) override;
  const uint8_t* Input(int chunk) const {
    return send_ + static_cast<size_t>(displs_[static_cast<size_t>(chunk)]) * elem_bytes_;
  }
  int Count(int chunk) const { return counts_[static_cast<size_t>(chunk)]; }
  // Where step `step` receives: the caller's buffer in the last step, else a partial sum buffer.
  uint8_t* RecvBuffer(int step);

  const uint8_t* send_ = nullptr;
  uint8_t* recv_ = nullptr;
  std::vector<int> counts_, displs_;
  size_t elem_bytes_ = 0;
  MPI_Op op_ = MPI_OP_NULL;
  // Partial sums: step s receives into partial_[s % 2] and sends partial_[(s - 1) % 2].
  std::vector<uint8_t> partial_[2];
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_RING_REDUCE_SCATTER_H_
