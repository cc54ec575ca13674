// Delayed updates and update periods for allreduces (DeFT's two moves; docs/scheduler.md).
//
// An allreduce submitted with delay d, period p and phase f (AllreduceOptions) is handled here,
// in front of negotiation. A tensor's submissions are numbered n = 0, 1, ... on every rank alike
// (every rank submits the same sequence, as for any allreduce), and each one does three things:
//   - communicate: when n % p == f, the input plus the residual kept since the tensor's last
//     communicating submission is copied into a buffer the runtime owns and reduced there by an
//     ordinary allreduce (same name, op and compression); the residual becomes zero. Otherwise
//     the input is added to the residual and nothing is sent. So for every rank, at all times,
//     sent + residual = the sum of its inputs, exactly (error feedback of the skipped steps).
//   - deliver: the handle of submission n receives the reduced result of communicating
//     submission m = n - d, once that allreduce is done (has_update() is true). When no
//     communicating submission is due, the output is zeroed and the handle completes at once
//     with has_update() false: the first d submissions, and with p > 1 every step whose
//     submission n - d did not communicate. The program skips that layer's update.
//   - the submission n's own input is consumed before anything is written to its output, so an
//     in-place allreduce (input == output) is fine.
// Memory the runtime holds, per tensor: one residual when p > 1, and the reduction buffers of the
// communicating submissions not yet delivered, at most ceil((d + 1) / p) of them (Stats().
// delayed_bytes reports the total).
//
// Shutdown and Join with results in flight: a result not yet delivered when the runtime shuts
// down, and a non-zero residual, are discarded with a warning on that rank naming each tensor
// and what it still held (Describe()); a program that wants them runs d more steps, or p - 1
// more, first. A rank that joined contributes zeros to the others' delayed allreduces, as to any
// allreduce; its own delayed handles keep completing as the others' reductions finish.
//
// The reductions run under the name "<name>~<slot>", slot = (communicating submission number)
// mod (d / p + 2): a tensor may have several reductions in flight, and names must be unique
// among those, but a short cycle of names keeps negotiation's response cache working. They carry
// the schedule ("delay d, period p, phase f"), so ranks that disagree on it fail with a mismatch
// error naming both schedules instead of reducing different steps together.
//
// Threading: Submit from any thread; the reductions complete on the coordinator thread, which
// copies a result into the waiting handle's output there.
#ifndef OVERLAP_RUNTIME_PLANES_DELAY_LINE_H_
#define OVERLAP_RUNTIME_PLANES_DELAY_LINE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/api/handle_state.h"
#include "runtime/overlap.h"

namespace overlap {

// What delayed updates support, in the delay line and in scheduled plans alike
// (executable_plan.h, plan_delays.h): delays and periods up to these bounds, and, since error
// feedback keeps the skipped steps in a residual, float32 or float64 sums and averages.
inline constexpr int kMaxUpdateDelay = 16;
inline constexpr int kMaxUpdatePeriod = 64;
inline bool DelayableDtype(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}
inline bool DelayableOp(ReduceOp op) { return op == ReduceOp::kSum || op == ReduceOp::kAverage; }

class DelayLine {
 public:
  // Submits the reduction of a runtime-owned buffer (input == output) under `name`.
  using SubmitFn = std::function<absl::StatusOr<Handle>(const std::string& name, const Tensor& data,
                                                        const AllreduceOptions& options,
                                                        const std::string& schedule)>;
  // `wait_bound`: the backstop of the waits on its handles (runtime/api/handle_state.h).
  DelayLine(int rank, internal::WaitBound wait_bound, SubmitFn submit)
      : rank_(rank), wait_bound_(wait_bound), submit_(std::move(submit)) {}
  ~DelayLine();

  // Checks the options (delay 0..16, period 1..64, 0 <= phase < period, float32 or float64 on the
  // CPU, op sum or average, input and output alike), then does the three things above.
  // InvalidArgument naming the rank, the tensor and the cause; a tensor's dtype, shape and
  // schedule may not change between submissions.
  absl::StatusOr<Handle> Submit(const std::string& name, const Tensor& input, const Tensor& output,
                                const AllreduceOptions& options);

  // Bytes held: residuals plus undelivered reduction buffers.
  int64_t held_bytes() const;

  // Every tensor's schedule, submission count, residual and undelivered results, for a
  // checkpoint. Waits up to `timeout` for reductions still running (a result is saved reduced);
  // their error, or DeadlineExceeded naming the tensor, if they do not finish.
  absl::StatusOr<std::string> Save(absl::Duration timeout);
  // Replaces all state with a Save() snapshot: the next submission of each tensor continues as
  // if the saved run had gone on. InvalidArgument naming the rank and the field on bytes that
  // are not such a snapshot (nothing is replaced then).
  absl::Status Restore(const std::string& snapshot);

  // What a tensor still holds, for the shutdown warning.
  struct Pending {
    std::string name;
    int results = 0;        // reductions submitted and not delivered
    bool residual = false;  // a non-zero residual
  };
  std::vector<Pending> Describe() const;

 private:
  struct Result;  // one communicating submission's reduction, until delivered
  struct Line {
    DataType dtype = DataType::kFloat32;
    std::vector<int64_t> shape;
    int delay = 0, period = 1, phase = 0;
    int64_t submitted = 0;
    std::vector<uint8_t> residual;  // p > 1 only
    std::deque<std::shared_ptr<Result>> in_flight;
  };

  absl::Status Check(const std::string& name, const Tensor& input, const Tensor& output,
                     const AllreduceOptions& options, const Line* line) const;

  const int rank_;
  const internal::WaitBound wait_bound_;
  const SubmitFn submit_;
  mutable absl::Mutex mu_;
  std::map<std::string, Line> lines_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLANES_DELAY_LINE_H_
