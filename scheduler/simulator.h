// Discrete-event simulator of a data-parallel iteration executing a Plan (plan.h semantics).
//
// One compute stream runs forward (layers in order), backward (in reverse) and the optimizer
// step, and each delayed tensor's extra optimizer steps of look-ahead (TensorInfo::looks_ahead)
// before its layer's forward (lookahead.h); each channel of the cost model runs its buckets one
// at a time in plan order. Every event time is the maximum of the times it waits for (stream
// free, gradients ready, channel free, gradients applied), so the schedule is the unique
// earliest-start schedule of those dependencies. Iterations are simulated until the state that
// later iterations depend on (channel backlogs, pending buckets), taken relative to the compute
// stream, repeats with a period of 6 x the least common multiple of the update periods; the
// iteration time is then the exact mean over that window.
#ifndef OVERLAP_SCHEDULER_SIMULATOR_H_
#define OVERLAP_SCHEDULER_SIMULATOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/cost_model.h"
#include "scheduler/plan.h"
#include "scheduler/profile.h"

namespace overlap::sched {

struct SimOptions {
  int max_iterations = 2000;
  double relative_tolerance = 1e-9;
  bool record_trace = false;      // fill SimResult::trace_json with the last iterations
  bool record_iteration = false;  // fill SimResult::iteration_events
  int trace_iterations = 3;
};

// Timing of one bucket in a steady-state iteration, in ms from the start of that iteration's
// backward (so a bucket running in the next forward has start > backward_ms).
struct BucketTiming {
  double ready_ms = 0;
  double start_ms = 0;
  double end_ms = 0;
};

// One span of the simulated schedule: a layer's compute or a bucket's collective.
struct SimEvent {
  // "fwd <layer>", "bwd <layer>", "update[ <layer>]", "look-ahead <layer>",
  // "<collective> #<b> (<n> B)"
  std::string name;
  std::string lane;  // "compute" or the channel's name
  double start_ms = 0, end_ms = 0;
};

struct SimResult {
  double iteration_ms = 0;     // steady-state time between consecutive forward starts
  double compute_ms = 0;       // forward + backward + update (+ lookahead_ms)
  double lookahead_ms = 0;     // mean extra optimizer steps of look-ahead (lookahead.h)
  double comm_ms = 0;          // sum of collective times per iteration (period-weighted)
  double exposed_comm_ms = 0;  // iteration_ms - compute_ms: time the compute stream waited
  int iterations = 0;          // iterations simulated
  bool converged = false;
  std::vector<BucketTiming> buckets;  // in plan order; empty times for skipped buckets
  std::string trace_json;             // Chrome trace (Perfetto) when SimOptions::record_trace
  // When SimOptions::record_iteration: every span that starts within one steady-state iteration
  // (from its forward's start to the next forward's), in ms from that forward's start. The
  // runtime draws it beside each measured step.
  std::vector<SimEvent> iteration_events;
};

// Simulates `plan` (validated first with ValidatePlan; its error is returned as is).
absl::StatusOr<SimResult> Simulate(const Profile& profile, const Plan& plan, const CostModel& cost,
                                   const SimOptions& options = {});

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_SIMULATOR_H_
