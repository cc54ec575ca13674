// RingSteps: the step machine the point-to-point rings share (ring_allgather.h,
// ring_reduce_scatter.h).
//
// A ring on n ranks runs n - 1 steps; in each, rank r receives one chunk from rank r - 1 and sends
// one to rank r + 1. A ring posts step 0 when it starts (Begin); Test moves to the next step once
// both of the step's messages are done, after the ring has handled what arrived (Arrived), and
// returns true after the last. With one rank there are no steps. What the messages carry and
// where they land is the ring's (Post).
//
// Messages use `tag` on `comm`: two rings in flight on one communicator need different tags.
// Abandoned mid-collective (the job is failing), the receive is cancelled and the send, which
// cannot be, is released for MPI to finish: its buffer must outlive the ring (send_pending()).
// Threading: one thread calls Test.
#ifndef OVERLAP_COLLECTIVES_RING_STEPS_H_
#define OVERLAP_COLLECTIVES_RING_STEPS_H_

#include <mpi.h>

#include <string>

#include "absl/status/statusor.h"
#include "collectives/executor.h"

namespace overlap {

class RingSteps : public Work {
 public:
  ~RingSteps() override;

  absl::StatusOr<bool> Test() final;

 protected:
  // `what` ("ring allgather") names the ring in errors.
  explicit RingSteps(std::string what) : what_(std::move(what)) {}

  // Reads this rank's place in `comm`.
  absl::Status Init(MPI_Comm comm, int tag, MPI_Datatype type);
  // Posts step 0 (nothing on one rank).
  absl::Status Begin();
  // Posts step `step`'s messages, through Exchange.
  virtual absl::Status Post(int step) = 0;
  // Both of step `step`'s messages are done.
  virtual absl::Status Arrived(int step) {
    (void)step;
    return absl::OkStatus();
  }
  // Receives `recv_count` elements from rank - 1 into `into`, and sends `send_count` from `from`
  // to rank + 1.
  absl::Status Exchange(void* into, int recv_count, const void* from, int send_count);

  // The chunk `offset` places after this rank's, modulo the ring.
  int Chunk(int offset) const { return ((rank_ + offset) % size_ + size_) % size_; }
  bool send_pending() const { return requests_[1] != MPI_REQUEST_NULL; }
  MPI_Datatype type() const { return type_; }
  const std::string& what() const { return what_; }

  int rank_ = 0;
  int size_ = 1;

 private:
  const std::string what_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int tag_ = 0;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  int step_ = 0;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_RING_STEPS_H_
