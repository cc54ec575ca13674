#include "collectives/mpi_wait.h"

#include "absl/strings/str_cat.h"
#include "collectives/mpi_executor.h"
#include "collectives/poll_wait.h"

namespace overlap {

absl::Status MpiCheck(int rc, absl::string_view what) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, " failed: ", MpiErrorString(rc)));
}

absl::Status WaitWithDeadline(MPI_Request* request, absl::Duration limit, absl::string_view what,
                              const std::function<absl::Status()>& check) {
  return PollWithDeadline(
      [request]() -> absl::StatusOr<bool> {
        int done = 0;
        const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return absl::UnavailableError(MpiErrorString(rc));
        return done != 0;
      },
      limit, what, check);
}

}  // namespace overlap
