// Fuzzes sched::Plan::Deserialize, which every rank runs on the plan rank 0 broadcasts. A plan
// that deserializes must serialize back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "scheduler/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<overlap::sched::Plan> plan = overlap::sched::Plan::Deserialize(bytes);
  if (!plan.ok()) return 0;
  const std::string again = plan->Serialize();
  absl::StatusOr<overlap::sched::Plan> reparsed = overlap::sched::Plan::Deserialize(again);
  if (!reparsed.ok() || reparsed->Serialize() != again) std::abort();
  (void)plan->ToJson();
  (void)plan->MaxDelay();
  return 0;
}
