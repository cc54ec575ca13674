// Profile: what one training iteration of a model looks like to the scheduler.
//
// A profile lists the model's layers in forward order with their forward and backward compute
// times and the gradient tensors each layer owns. Forward runs the layers in order, backward in
// reverse; a tensor's gradient is ready when its layer's backward ends, and its parameter is first
// needed when its layer's forward starts. Everything else (ready times, first-use times, totals)
// is derived by Finalize() so that it cannot disagree with the layer list.
//
// JSON format (times in milliseconds, sizes in bytes; "dtype" optional, default "float32";
// "may_delay" optional, default true, and "looks_ahead" optional, default false, see TensorInfo;
// "optimizer_ms" optional, default 0, see Profile):
//   {"model": "vgg16", "update_ms": 3.1,
//    "layers": [{"name": "conv1", "forward_ms": 1.0, "backward_ms": 2.0,
//                "tensors": [{"name": "conv1.weight", "bytes": 6912, "dtype": "float32"}]}]}
#ifndef OVERLAP_SCHEDULER_PROFILE_H_
#define OVERLAP_SCHEDULER_PROFILE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/dtype.h"

namespace overlap::sched {

// One gradient tensor. `ready_ms` and `first_use_ms` are derived (see Profile::Finalize).
struct TensorInfo {
  std::string name;
  int64_t bytes = 0;
  DataType dtype = DataType::kFloat32;
  int layer = 0;            // index into Profile::layers
  double ready_ms = 0;      // gradient ready, measured from the start of backward
  double first_use_ms = 0;  // parameter first read, measured from the start of forward
  // A gradient applied as an update, which a delayed plan may deliver late. False for a tensor
  // the step reads as soon as it is reduced (a metric, batch-norm statistics): planners give its
  // buckets no delay and no update period, and never fuse it with tensors that may be delayed.
  bool may_delay = true;
  // The program's optimizer looks ahead on it under delays (the adapters' default staleness
  // correction): delayed, it costs its share of the optimizer step (by bytes) once more per extra
  // step lookahead.h counts, which the simulator charges. False where the program predicts or does
  // not correct (the C++ example).
  bool looks_ahead = false;

  // Number of elements; bytes must be a multiple of the element size (checked by Finalize).
  int64_t count() const { return bytes / static_cast<int64_t>(DataTypeSize(dtype)); }
};

struct LayerInfo {
  std::string name;
  double forward_ms = 0;
  double backward_ms = 0;
  std::vector<int> tensors;  // indices into Profile::tensors
};

struct Profile {
  std::string model;
  double update_ms = 0;           // optimizer step for all parameters
  // The program's own measure of that optimizer step, wherever it ran (0: none). A program
  // that updates each layer at its next forward spends its optimizer's time inside the measured
  // forward, so update_ms is then small; look-ahead's extra steps are priced from this instead
  // where the program gave it (lookahead.h). Not charged as compute itself.
  double optimizer_ms = 0;
  std::vector<LayerInfo> layers;  // forward order
  std::vector<TensorInfo> tensors;

  // Derived by Finalize().
  double forward_ms = 0;
  double backward_ms = 0;
  int64_t total_bytes = 0;

  double compute_ms() const { return forward_ms + backward_ms + update_ms; }

  // Appends a layer and its tensors (convenience for builders and tests); call Finalize after.
  void AddLayer(absl::string_view name, double forward_ms, double backward_ms,
                const std::vector<std::pair<std::string, int64_t>>& tensors);

  // Recomputes the derived fields and checks the invariants: at least one tensor, names
  // non-empty and unique, times finite and >= 0, bytes > 0 and a multiple of the element size.
  // Returns InvalidArgument naming the layer/tensor and the cause.
  absl::Status Finalize();

  // The JSON format above (derived fields omitted), pretty enough to diff.
  std::string ToJson() const;
};

// Parses the JSON format above. `source` names the input in error messages (a file name).
// Returns InvalidArgument naming the source, the JSON path (e.g. layers[3].tensors[0].bytes)
// and the cause for malformed JSON, missing or mistyped fields, or a profile Finalize rejects.
absl::StatusOr<Profile> ParseProfileJson(absl::string_view text,
                                         absl::string_view source = "<string>");

// Reads `path` and parses it. NotFound if the file cannot be read.
absl::StatusOr<Profile> LoadProfileJson(const std::string& path);

// The shortest step that any synchronous schedule can reach on `profile` when one step's
// gradients keep the link busy for `comm_ms` (a Finalize()d profile). Each gradient must arrive
// before its parameter's next forward, so a step's traffic is over by the time the forward reaches
// the last parameter it reads, and the next step's traffic cannot start before backward has made
// the first gradient. The compute in between hides no communication:
//   max(compute_ms(), comm_ms + (forward_ms - max first_use_ms) + min ready_ms).
// On BERT-base that is the pooler and prediction head, 22% of the compute. Delayed updates
// (DeFT) are not bound by it; it is the yardstick of the synchronous planners.
double SynchronousBoundMs(const Profile& profile, double comm_ms);

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_PROFILE_H_
