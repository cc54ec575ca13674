// The rings' shared step machine (ring_steps.h states the contract).
#include "collectives/ring_steps.h"

#include "absl/strings/str_cat.h"
#include "collectives/mpi_wait.h"

namespace overlap {

RingSteps::~RingSteps() {
  if (requests_[0] != MPI_REQUEST_NULL) {
    MPI_Cancel(&requests_[0]);
    MPI_Request_free(&requests_[0]);
  }
  if (requests_[1] != MPI_REQUEST_NULL) MPI_Request_free(&requests_[1]);
}

absl::Status RingSteps::Init(MPI_Comm comm, int tag, MPI_Datatype type) {
  comm_ = comm;
  tag_ = tag;
  type_ = type;
  absl::Status s = MpiCheck(MPI_Comm_rank(comm, &rank_), absl::StrCat(what_, ": MPI_Comm_rank"));
  if (s.ok()) s = MpiCheck(MPI_Comm_size(comm, &size_), absl::StrCat(what_, ": MPI_Comm_size"));
  return s;
}

absl::Status RingSteps::Begin() { return size_ == 1 ? absl::OkStatus() : Post(0); }

absl::Status RingSteps::Exchange(void* into, int recv_count, const void* from, int send_count) {
  absl::Status s =
      MpiCheck(MPI_Irecv(into, recv_count, type_, Chunk(-1), tag_, comm_, &requests_[0]),
               absl::StrCat(what_, ": MPI_Irecv"));
  if (!s.ok()) return s;
  return MpiCheck(MPI_Isend(from, send_count, type_, Chunk(1), tag_, comm_, &requests_[1]),
                  absl::StrCat(what_, ": MPI_Isend"));
}

absl::StatusOr<bool> RingSteps::Test() {
  if (step_ == size_ - 1) return true;
  int done = 0;
  // Polled in a tight loop: the error's text is built only on an error.
  const int rc = MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS) return MpiCheck(rc, absl::StrCat(what_, ": MPI_Testall"));
  if (!done) return false;
  absl::Status s = Arrived(step_);
  if (!s.ok()) return s;
  if (++step_ == size_ - 1) return true;
  s = Post(step_);
  if (!s.ok()) return s;
  return false;
}

}  // namespace overlap
