// The optimizer updates the adapters' look-ahead adds to a delayed tensor's iterations, so that
// the simulator (and through it every planner's choice and the runtime's predicted step) charges
// them. overlap/staleness.py and overlap/torch/staleness.py say what look-ahead does; this
// counts it, for a tensor whose slices share one schedule (delay d, period p, phase f) from the
// plan's first pass:
//  - before the forward of pass n, the optimizer's step on a scratch copy once per pass whose
//    gradient no update has applied yet (PendingPasses: d with no period, d to d + p - 1 with
//    one; none before the first update), or, under a period, one step when no update came since
//    the last pass's look-ahead (the adapters continue from that point);
//  - the update that carries k passes' summed gradients (k = p, phase + 1 for the first) is
//    applied as k optimizer steps instead of one.
// A tensor with mixed schedules is predicted, not looked ahead: it costs no update.
// overlap.tensorflow recomputes every pending pass each step instead of continuing, so under a
// period it runs more steps than counted here.
#ifndef OVERLAP_SCHEDULER_LOOKAHEAD_H_
#define OVERLAP_SCHEDULER_LOOKAHEAD_H_

#include <vector>

#include "scheduler/plan.h"
#include "scheduler/profile.h"

namespace overlap::sched {

// Passes before `pass` whose gradients no update has applied by the forward of `pass`: those
// after the last communicating pass c whose update came (c + delay <= pass - 1,
// c % period == phase); 0 while none came. overlap/staleness.py's pending_passes.
int PendingPasses(int pass, int delay, int period, int phase);

// How many passes' gradients the communicating pass `pass` sends summed: period, phase + 1 for
// the first; 0 when `pass` does not communicate. overlap/staleness.py's carried_passes.
int CarriedPasses(int pass, int period, int phase);

// The optimizer steps, beyond the one a synchronous step takes, that look-ahead runs for the
// tensor in pass `pass` (>= 0): scratch steps before its forward, and the extra steps of the
// update applied before that forward (a period's sum as several steps).
int LookAheadSteps(int pass, int delay, int period, int phase);

// What look-ahead costs a profile under a plan: each tensor that looks ahead
// (TensorInfo::looks_ahead) and whose every applied slice (allreduce or allgather) shares one
// delayed schedule costs its share (by bytes) of the optimizer step per LookAheadSteps, before
// its layer's forward: Profile::optimizer_ms where the program measured it, else update_ms.
// The simulator charges it; the runtime takes it out of steps it measured under a delayed plan,
// which hold it already.
class LookAheadCost {
 public:
  LookAheadCost(const Profile& profile, const Plan& plan);

  bool empty() const { return empty_; }
  // The look-ahead compute before layer `layer`'s forward in pass `pass`, in ms.
  double Ms(int layer, int pass) const;
  // Per layer, its mean over passes in steady state (each tensor's schedule repeats with its
  // period once its first update has come).
  std::vector<double> MeanMsByLayer() const;

 private:
  struct Tensor {
    double step_ms = 0;  // its share of one optimizer step
    int delay = 0, period = 1, phase = 0;
  };
  std::vector<std::vector<Tensor>> by_layer_;
  bool empty_ = true;
};

// A profile measured while `plan` ran holds that plan's look-ahead already, in its forward
// times: takes its mean (LookAheadCost::MeanMsByLayer) out of each layer's forward (at most
// all of it) and re-derives the profile, so that a candidate simulated on it pays only its own.
// `plan` must fit `profile` (ValidatePlan). Returns the ms per step taken out.
double TakeOutLookAhead(const Plan& plan, Profile* profile);

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_LOOKAHEAD_H_
