// The shared state behind a Handle: completed once, by the coordinator thread, or, for a delayed
// allreduce whose result is already there (runtime/planes/delay_line.h), by the submitting thread.
#ifndef OVERLAP_RUNTIME_API_HANDLE_STATE_H_
#define OVERLAP_RUNTIME_API_HANDLE_STATE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collectives/buffer_ops.h"
#include "runtime/overlap.h"

namespace overlap {
namespace internal {

// The backstop behind every wait on one operation (Handle::Wait(), and overlap.torch's and
// overlap.tensorflow's waits through the C API). The runtime ends every operation itself: a stall
// fails after stall_timeout_s, a lost peer or stuck collective after collective_timeout_s, and a
// planned unit whose check stalls after both. So a wait that has gone on for their sum plus
// `grace` means the runtime failed to end it, a bug; the wait gives up with Expired's error and the
// operation goes on (its buffers must stay allocated until it ends). `grace`: 30 s, less in tests.
struct WaitBound {
  double stall_timeout_s = 300;
  double collective_timeout_s = 300;
  absl::Duration grace = absl::Seconds(30);

  absl::Duration bound() const {
    return absl::Seconds(stall_timeout_s + collective_timeout_s) + grace;
  }
  // DeadlineExceeded: "rank R: `what` did not end within S s of this rank's wait: ...", naming
  // both settings and asking for a report.
  absl::Status Expired(int rank, const std::string& what, absl::Duration waited) const;
};

// When a handle was first waited on and when it completed. Shared, because the step profiler
// reads it when the step closes, after the program may have dropped the handle: overlap.torch and
// overlap.tensorflow free theirs as soon as the wait returns.
class WaitClock {
 public:
  void MarkWaited(absl::Time now);  // the first call wins
  void MarkDone(absl::Time now);
  absl::Time first_wait() const;  // absl::InfiniteFuture() until MarkWaited
  absl::Time done_at() const;     // absl::InfiniteFuture() until MarkDone

 private:
  mutable absl::Mutex mu_;
  absl::Time first_wait_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time done_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

// How many times the program has seen an operation finish: a Wait that returned its outcome, a
// Poll that returned true, a done callback run. A frozen plan never makes tensors submitted on
// either side of such a moment wait for each other (runtime/plan/launch_units.h): the program may
// have needed the first one's result before it submitted the second. A Wait still blocked, or a
// Poll of false, tells the program nothing, so they do not count: overlap.tensorflow waits on every
// handle at once, from a thread of its own. Shared by a runtime and its handles, which may
// outlive it.
using Observations = std::atomic<uint64_t>;

class HandleState {
 public:
  // `rank` prefixes the timeout message of Wait. `observations`, if given, counts the program's
  // sights of this operation's end: a Wait that returns it, a Poll of true, the run of `on_done`.
  // `wait_bound`: the runtime's, for WaitBounded.
  HandleState(std::string name, int rank, DoneCallback on_done,
              std::shared_ptr<Observations> observations = nullptr, WaitBound wait_bound = {})
      : name_(std::move(name)),
        rank_(rank),
        on_done_(std::move(on_done)),
        observations_(std::move(observations)),
        wait_bound_(wait_bound) {}

  const std::string& name() const { return name_; }

  // Runs the callback, then records the outcome and wakes waiters. Later calls are ignored, so
  // a fatal error and a normal completion racing each other cannot complete a handle twice.
  void Complete(absl::Status status);

  bool done() const;
  // The program's Poll: done(), counted as an observation when true.
  bool Poll() const;
  // Records the first call's time (first_wait) before blocking; counted as an observation when it
  // returns the outcome (not on timeout).
  absl::Status Wait(absl::Duration timeout) const;
  // Wait until the operation ends or wait_bound().bound() passes, then WaitBound::Expired.
  absl::Status WaitBounded() const;
  const WaitBound& wait_bound() const { return wait_bound_; }
  // When Wait was first called (the step profiler's first use) and when Complete recorded the
  // outcome (with the first, how long the first Wait blocked); it outlives this state.
  std::shared_ptr<const WaitClock> clock() const { return clock_; }

  // Runtime-owned result for operations whose output size is decided by negotiation; set by the
  // coordinator before Complete.
  Tensor& output() { return output_; }
  // The memory output() points into, on the operation's device.
  std::unique_ptr<DeviceMemory>& output_memory() { return output_memory_; }
  std::vector<int64_t>& received_splits() { return received_splits_; }
  // Delayed updates (runtime/planes/delay_line.h): false when the output holds no update. Set
  // before Complete.
  void set_has_update(bool has_update) { has_update_ = has_update; }
  bool has_update() const { return has_update_; }

 private:
  const std::string name_;
  const int rank_;
  DoneCallback on_done_;
  const std::shared_ptr<Observations> observations_;
  const WaitBound wait_bound_;
  mutable absl::Mutex mu_;
  bool completing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  const std::shared_ptr<WaitClock> clock_ = std::make_shared<WaitClock>();
  Tensor output_;
  std::unique_ptr<DeviceMemory> output_memory_;
  std::vector<int64_t> received_splits_;
  bool has_update_ = true;
};

}  // namespace internal
}  // namespace overlap

#endif  // OVERLAP_RUNTIME_API_HANDLE_STATE_H_
