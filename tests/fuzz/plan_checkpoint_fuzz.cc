// Fuzzes DecodePlanCheckpoint and CheckpointedPlan, which read a scheduled plan, its tensors and
// its delayed state back from a checkpoint file (runtime/plan/plan_checkpoint.h). A checkpoint that
// decodes must encode to bytes that decode to the same encoding; one that CheckpointedPlan accepts
// must restore into its plan's PlanDelays and save back the same pass count and results.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "runtime/plan/plan_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<overlap::PlanCheckpoint> checkpoint = overlap::DecodePlanCheckpoint(bytes);
  if (!checkpoint.ok()) return 0;
  const std::string encoded = overlap::EncodePlanCheckpoint(*checkpoint);
  absl::StatusOr<overlap::PlanCheckpoint> again = overlap::DecodePlanCheckpoint(encoded);
  if (!again.ok() || overlap::EncodePlanCheckpoint(*again) != encoded) std::abort();
  absl::StatusOr<overlap::ExecutablePlan> plan = overlap::CheckpointedPlan(*checkpoint, 2);
  if (!plan.ok()) return 0;
  auto shared = std::make_shared<const overlap::ExecutablePlan>(*std::move(plan));
  overlap::PlanDelays delays(shared, /*size=*/2, /*poke=*/{});
  const size_t results = checkpoint->state.results.size();
  const int64_t passes = checkpoint->state.passes;
  // A state CheckpointedPlan accepted restores on the host (the only device that can fail
  // here is a device without memory).
  if (!delays.Restore(std::move(checkpoint->state)).ok()) std::abort();
  absl::StatusOr<overlap::PlanDelays::State> saved = delays.Save();
  if (!saved.ok() || saved->passes != passes || saved->results.size() != results) std::abort();
  return 0;
}
