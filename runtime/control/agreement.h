// Agreement among ranks before they act together: every rank's word on every rank.
//
// Init and the process-set calls (AddProcessSet, RemoveProcessSet) are collective; a rank that
// finds a problem must not leave while the others wait in the next collective for it. So each
// rank first states its view (empty: no objection), every rank receives every rank's, and all
// decide the same way from the same facts.
#ifndef OVERLAP_RUNTIME_CONTROL_AGREEMENT_H_
#define OVERLAP_RUNTIME_CONTROL_AGREEMENT_H_

#include <mpi.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace overlap {

// Every rank's `mine`, indexed by rank in `comm` (which should have MPI_ERRORS_RETURN).
// Collective over `comm`; `call` names the API call for messages ("Init", "AddProcessSet").
// DeadlineExceeded "rank R: <call>: waiting for every rank to call <call> (<limit_name>)" when
// some rank does not take part within `limit`; Unavailable naming the MPI call when MPI fails.
absl::StatusOr<std::vector<std::string>> AllgatherStrings(MPI_Comm comm, int rank, int size,
                                                          const std::string& mine,
                                                          absl::Duration limit,
                                                          absl::string_view call,
                                                          absl::string_view limit_name);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CONTROL_AGREEMENT_H_
