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
#ifndef OVERLAP_SCHEDULER_LOOKAHEAD_H_
#define OVERLAP_SCHEDULER_LOOKAHEAD_H_

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

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_LOOKAHEAD_H_
