// The small collectives that negotiation (runtime/negotiation/negotiator.h) and planned execution's
// consistency checks (runtime/planes/planned_mode.h) run on a control communicator of their own: a
// bitwise AND or OR of 64-bit words, an allgather of one word per rank, a gather of byte strings
// at rank 0 and a broadcast of a byte string from rank 0.
//
// Every call starts a nonblocking collective and returns its request. Like calls on one MPI
// communicator, the calls on one ControlCollectives form a sequence: every rank must start the
// same calls in the same order. Buffers passed to a call must stay valid, and untouched, until
// its request completes; a request may be destroyed before it completes only when the job is
// ending (an MPI collective cannot be cancelled).
//
// MpiControlCollectives (runtime/control/mpi_control_collectives.h) runs them on an MPI communicator.
// tests/fakes/fake_control.h runs N ranks in one process, so that the negotiator and planned
// execution are tested without mpirun.
#ifndef OVERLAP_RUNTIME_CONTROL_CONTROL_COLLECTIVES_H_
#define OVERLAP_RUNTIME_CONTROL_CONTROL_COLLECTIVES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace overlap {

class ControlRequest {
 public:
  virtual ~ControlRequest() = default;
  // True once the collective has completed and its results are in place. An error when it failed;
  // the message names the underlying call and its cause, not the caller's purpose.
  virtual absl::StatusOr<bool> Test() = 0;
};

enum class BitOp { kAnd, kOr };

class ControlCollectives {
 public:
  virtual ~ControlCollectives() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // words[i] becomes the AND (or OR) of every rank's words[i]. Every rank passes as many words.
  virtual absl::StatusOr<std::unique_ptr<ControlRequest>> StartBitwise(
      BitOp op, absl::Span<uint64_t> words) = 0;
  // (*all)[r] becomes rank r's `mine`; `all` is resized to size() at the start.
  virtual absl::StatusOr<std::unique_ptr<ControlRequest>> StartAllgather(
      uint64_t mine, std::vector<uint64_t>* all) = 0;
  // Rank 0 receives every rank's `mine` (its own included) in (*all)[r]; `all` is left empty on
  // the other ranks. Strings may differ in length.
  virtual absl::StatusOr<std::unique_ptr<ControlRequest>> StartGather(
      std::string mine, std::vector<std::string>* all) = 0;
  // Rank 0's `*bytes` replaces every other rank's `*bytes`, whatever its length.
  virtual absl::StatusOr<std::unique_ptr<ControlRequest>> StartBroadcast(std::string* bytes) = 0;
};

// Starts a control collective and waits for it with PollWithDeadline (collectives/poll_wait.h):
// OK once it completed; otherwise the error, its message starting with `what`
// ("<what> failed: ..." for a failed start or collective, "<what> did not complete within ..."
// past `limit`), or `check`'s error when that fails first.
absl::Status RunControl(
    const std::function<absl::StatusOr<std::unique_ptr<ControlRequest>>()>& start,
    absl::Duration limit, absl::string_view what,
    const std::function<absl::Status()>& check = nullptr);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CONTROL_CONTROL_COLLECTIVES_H_
