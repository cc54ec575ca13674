// Waiting for one MPI request with a deadline, which MPI_Wait cannot do.
#ifndef OVERLAP_COLLECTIVES_MPI_WAIT_H_
#define OVERLAP_COLLECTIVES_MPI_WAIT_H_

#include <mpi.h>

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace overlap {

// Tests `request` until it completes: spinning (yielding the core) at first, then in short sleeps
// so that a peer that is busy gets the core. Unavailable with MPI's error text when the request
// fails; DeadlineExceeded when it has not completed after `limit`. Messages start with `what`.
// `check`, when given, runs about every millisecond and ends the wait with its error (for
// example a peer's control connection closing, which MPI itself may not notice for minutes).
absl::Status WaitWithDeadline(MPI_Request* request, absl::Duration limit, absl::string_view what,
                              const std::function<absl::Status()>& check = nullptr);

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_MPI_WAIT_H_
