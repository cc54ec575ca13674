// The options a training loop's gradients are reduced with in the scheduled-plan tests: a delayed
// plan may deliver them late (AllreduceOptions::plan_may_delay), as the adapters' optimizers ask.
#ifndef OVERLAP_TESTS_RUNTIME_GRADIENT_OPTIONS_H_
#define OVERLAP_TESTS_RUNTIME_GRADIENT_OPTIONS_H_

#include "runtime/overlap.h"

namespace overlap::testing {

inline AllreduceOptions GradientOptions() {
  AllreduceOptions options;
  options.plan_may_delay = true;
  return options;
}

}  // namespace overlap::testing

#endif  // OVERLAP_TESTS_RUNTIME_GRADIENT_OPTIONS_H_
