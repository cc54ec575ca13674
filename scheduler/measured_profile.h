// Building a Profile from timings the runtime measures on real iterations.
//
// The runtime sees tensors, not layers: for each gradient it can record when it became ready
// (from the start of backward) and when its parameter was first read (from the start of forward).
// ProfileFromMeasurements turns those into the layer list a Profile needs, so the planners and the
// simulator run unchanged on measured data.
#ifndef OVERLAP_SCHEDULER_MEASURED_PROFILE_H_
#define OVERLAP_SCHEDULER_MEASURED_PROFILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/dtype.h"
#include "scheduler/profile.h"

namespace overlap::sched {

struct TensorMeasurement {
  std::string name;
  int64_t bytes = 0;
  DataType dtype = DataType::kFloat32;
  double ready_ms = 0;      // gradient ready, from the start of backward
  double first_use_ms = 0;  // parameter first read, from the start of forward
  bool may_delay = true;    // TensorInfo::may_delay
  bool looks_ahead = false; // TensorInfo::looks_ahead
};

struct IterationMeasurement {
  std::string model;
  double forward_ms = 0;
  double backward_ms = 0;
  double update_ms = 0;
  double optimizer_ms = 0;  // Profile::optimizer_ms (0: the program measured none)
  std::vector<TensorMeasurement> tensors;
};

// Tensors with the same first-use time form one layer; layers are ordered by first use. A
// layer's gradients are taken as ready at the latest ready time of its own and all later layers'
// tensors, since in the layer model a layer's backward ends after every later layer's; this only
// ever makes a gradient later than measured, never earlier, so plans stay feasible. Time before
// the first tensor's first use (and backward time after the last gradient) goes to a leading
// layer with no tensors. The result's derived ready/first-use times therefore equal the
// measurements whenever they are consistent with a layer order.
// InvalidArgument naming the tensor for a negative or non-finite time, a ready time beyond
// backward_ms, a first use beyond forward_ms, or anything Profile::Finalize rejects.
absl::StatusOr<Profile> ProfileFromMeasurements(const IterationMeasurement& measurement);

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_MEASURED_PROFILE_H_
