// What every data plane of one runtime is given: the runtime's settings, this rank's place in the
// plane's communicator, the timeline, compression stage and communication meter the planes share,
// and the function a finished operation goes back through. One value instead of the same six loose parameters on
// each plane's constructor (DataPlane, CudaPlane, PlannedMode and the planes it makes).
#ifndef OVERLAP_RUNTIME_PLANES_PLANE_CONTEXT_H_
#define OVERLAP_RUNTIME_PLANES_PLANE_CONTEXT_H_

#include <functional>

#include "absl/status/status.h"
#include "runtime/plan/comm_meter.h"
#include "runtime/planes/compression_stage.h"
#include "runtime/config.h"
#include "runtime/api/pending_op.h"
#include "runtime/api/timeline.h"

namespace overlap {

struct PlaneContext {
  // Called once per finished operation, with its outcome.
  using CompleteFn = std::function<void(PendingOp& op, const absl::Status& status)>;

  Config config;
  int rank = 0;
  int size = 1;
  // Shared by the runtime's planes; each must outlive them. `compression` may be null (nothing
  // is compressed).
  Timeline* timeline = nullptr;
  CompressionStage* compression = nullptr;
  CompleteFn complete;
  // Where the planes report each collective's span (may be null: nothing measured).
  CommMeter* comm_meter = nullptr;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLANES_PLANE_CONTEXT_H_
