// Waiting with a deadline for something that can only be tested (an MPI request, a fake's
// collective), without burning the core a busy peer may need.
#ifndef OVERLAP_COLLECTIVES_POLL_WAIT_H_
#define OVERLAP_COLLECTIVES_POLL_WAIT_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace overlap {

// Calls `test` until it returns true: spinning (yielding the core) at first, then in short sleeps.
// An error from `test` ends the wait as "<what> failed: <its message>", with its code;
// DeadlineExceeded when it has not completed after `limit`. `check`, when given, runs about every
// millisecond and ends the wait with its error unchanged (for example a peer's control connection
// closing, which MPI itself may not notice for minutes).
absl::Status PollWithDeadline(const std::function<absl::StatusOr<bool>()>& test,
                              absl::Duration limit, absl::string_view what,
                              const std::function<absl::Status()>& check = nullptr);

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_POLL_WAIT_H_
