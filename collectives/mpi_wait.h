// Waiting for one MPI request with a deadline, which MPI_Wait cannot do, and turning MPI return
// codes into statuses.
#ifndef OVERLAP_COLLECTIVES_MPI_WAIT_H_
#define OVERLAP_COLLECTIVES_MPI_WAIT_H_

#include <mpi.h>

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace overlap {

// PollWithDeadline (poll_wait.h) on MPI_Test of `request`: Unavailable with MPI's error text when
// the request fails, DeadlineExceeded when it has not completed after `limit`, `check`'s error
// when it fails first. Messages start with `what`.
absl::Status WaitWithDeadline(MPI_Request* request, absl::Duration limit, absl::string_view what,
                              const std::function<absl::Status()>& check = nullptr);

// OK when `rc` is MPI_SUCCESS; otherwise Unavailable with "<what> failed: <MPI's error text>".
// `what` names the rank, the call and the peer or tensor, e.g. "rank 3: MPI_Ibcast of the
// response size". Only meaningful on a communicator with MPI_ERRORS_RETURN: under MPI's default
// handler a failing call aborts the job before it returns.
absl::Status MpiCheck(int rc, absl::string_view what);

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_MPI_WAIT_H_
