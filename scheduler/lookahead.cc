#include "scheduler/lookahead.h"

namespace overlap::sched {
namespace {

int Mod(int a, int b) { return ((a % b) + b) % b; }

}  // namespace

int PendingPasses(int pass, int delay, int period, int phase) {
  // Pass c's update comes in the step of pass c + delay, after that pass's forward.
  const int newest_applied = pass - 1 - delay;
  if (newest_applied < 0) return 0;
  const int last = newest_applied - Mod(newest_applied - phase, period);
  return last >= 0 ? pass - 1 - last : 0;
}

int CarriedPasses(int pass, int period, int phase) {
  if (pass < 0 || Mod(pass - phase, period) != 0) return 0;
  return pass + 1 < period ? pass + 1 : period;
}

int LookAheadSteps(int pass, int delay, int period, int phase) {
  const int pending = PendingPasses(pass, delay, period, phase);
  const int before = PendingPasses(pass - 1, delay, period, phase);
  // Under a period, a pass that no update reached continues from the last pass's point.
  const bool continues = period > 1 && before > 0 && pending == before + 1;
  const int scratch = continues ? 1 : pending;
  // The update applied before this forward carries pass - 1 - delay's gradients.
  const int carried = CarriedPasses(pass - 1 - delay, period, phase);
  return scratch + (carried > 1 ? carried - 1 : 0);
}

}  // namespace overlap::sched
