#include "runtime/control/agreement.h"

#include "absl/strings/str_cat.h"
#include "collectives/mpi_wait.h"

namespace overlap {

absl::StatusOr<std::vector<std::string>> AllgatherStrings(MPI_Comm comm, int rank, int size,
                                                          const std::string& mine,
                                                          absl::Duration limit,
                                                          absl::string_view call,
                                                          absl::string_view limit_name) {
  const std::string here = absl::StrCat("rank ", rank, ": ", call, ": ");
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<size_t>(size));
  MPI_Request request;
  // The first exchange is non-blocking, so that a rank whose peers never arrive times out.
  absl::Status s = MpiCheck(
      MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm, &request),
      here + "MPI_Iallgather of the message lengths");
  if (!s.ok()) return s;
  s = WaitWithDeadline(&request, limit,
                       absl::StrCat(here, "waiting for every rank to call ", call, " (",
                                    limit_name, ")"));
  if (!s.ok()) return s;
  std::vector<int> displs(static_cast<size_t>(size), 0);
  for (int r = 1; r < size; ++r) displs[r] = displs[r - 1] + lengths[r - 1];
  std::string all(static_cast<size_t>(displs.back() + lengths.back()), '\0');
  s = MpiCheck(MPI_Allgatherv(mine.data(), length, MPI_CHAR, &all[0], lengths.data(),
                              displs.data(), MPI_CHAR, comm),
               here + "MPI_Allgatherv of the messages");
  if (!s.ok()) return s;
  std::vector<std::string> words;
  for (int r = 0; r < size; ++r) {
    words.push_back(all.substr(static_cast<size_t>(displs[r]), static_cast<size_t>(lengths[r])));
  }
  return words;
}

}  // namespace overlap
