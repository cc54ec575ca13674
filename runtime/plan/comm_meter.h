// Communication meter: how long the network was busy per step, for parameters derived from the
// measured communication/computation ratio (covap's R=auto, compression/covap.h).
//
// The data planes report each collective's span (start to completion), in order of completion;
// the meter adds the part of it not already counted, so that queued or concurrent collectives
// are counted once (the union of the spans). The program's forward markers cut the total into
// steps; busy_ms_per_step() is the median of the last few steps.
//
// Threading: Add from the coordinator thread; OnForward and busy_ms_per_step from the program's
// thread; calls are serialised internally.
#ifndef OVERLAP_RUNTIME_PLAN_COMM_METER_H_
#define OVERLAP_RUNTIME_PLAN_COMM_METER_H_

#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace overlap {

class CommMeter {
 public:
  // Keeps the last `steps` steps (at least 1).
  explicit CommMeter(int steps);

  // A collective ran from `start` to `done`.
  void Add(absl::Time start, absl::Time done);
  // A forward marker: the busy time since the previous one is a step's.
  void OnForward();
  // Median busy time of the last steps (ms); 0 before the first whole step.
  double busy_ms_per_step() const;

 private:
  const size_t steps_;
  mutable absl::Mutex mu_;
  absl::Duration busy_ ABSL_GUARDED_BY(mu_);  // since the last forward marker
  absl::Time counted_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // a forward marker has come
  std::deque<double> per_step_ms_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLAN_COMM_METER_H_
