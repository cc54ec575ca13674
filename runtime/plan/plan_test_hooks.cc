#include "runtime/plan/plan_test_hooks.h"

namespace overlap {
namespace {

// Process-wide by nature: a test build installs it from a static initializer, before any
// runtime object exists to own it.
PlanTestHooks& Hooks() {
  static PlanTestHooks hooks;
  return hooks;
}

}  // namespace

void InstallPlanTestHooks(const PlanTestHooks& hooks) { Hooks() = hooks; }
const PlanTestHooks& InstalledPlanTestHooks() { return Hooks(); }

}  // namespace overlap
