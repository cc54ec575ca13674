// A non-blocking ring allgather(v) over MPI point-to-point messages.
//
// Why not MPI_Iallgatherv: Open MPI's non-blocking collectives (libnbc) post every rank's chunk to
// every other rank at once, so each link carries n - 1 concurrent flows that the TCP stack and a
// rate-limited NIC share badly. On 4 hosts over 1 Gbit/s links a 31 MB planned allgather took a
// median 254 ms (194-297) where the ring reduce-scatter of the same bucket took 197 ms; the ring
// moves (n-1)/n of the buffer per link, one flow at a time, as NCCL and Gloo do and as the
// simulator models. DeAR's all-gathers are the ones that carry this.
//
// Rank r starts by placing its own chunk at displacement r of `recv`. In step s = 0 .. n-2 it
// sends chunk (r-s) mod n to rank r+1 and receives chunk (r-s-1) mod n from rank r-1, straight
// into its place in `recv`; the chunk received in step s is the one sent in step s+1. Nothing is
// combined, so the result is bit-identical to any allgather.
//
// Messages use `tag` on `comm`: two rings in flight on one communicator must use different tags
// (the executor numbers rings per channel, which every rank does in the same order). The steps
// themselves, and what happens to an abandoned ring, are RingSteps' (ring_steps.h).
// Threading: one thread calls Test.
#ifndef OVERLAP_COLLECTIVES_RING_ALLGATHER_H_
#define OVERLAP_COLLECTIVES_RING_ALLGATHER_H_

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/ring_steps.h"

namespace overlap {

class RingAllgather : public RingSteps {
 public:
  // Starts the first step. `send` holds counts[rank] elements of `type` (`elem_bytes` each) and is
  // only read (it may be `recv` at this rank's displacement); `recv` receives sum(counts)
  // elements, chunk q at `displs[q]`. Both stay alive until Test returns true.
  static absl::StatusOr<std::unique_ptr<RingAllgather>> Start(MPI_Comm comm, int tag,
                                                              const void* send, void* recv,
                                                              std::vector<int> counts,
                                                              std::vector<int> displs,
                                                              MPI_Datatype type, size_t elem_bytes);

 private:
  RingAllgather() : RingSteps("ring allgather") {}
  absl::Status Post(int step) override;
  uint8_t* At(int chunk) const {
    return recv_ + static_cast<size_t>(displs_[static_cast<size_t>(chunk)]) * elem_bytes_;
  }
  int Count(int chunk) const { return counts_[static_cast<size_t>(chunk)]; }

  uint8_t* recv_ = nullptr;
  std::vector<int> counts_, displs_;
  size_t elem_bytes_ = 0;
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_RING_ALLGATHER_H_
