// Error-feedback memory: what each tensor has not sent yet, kept across steps and checkpoints.
//
// ResidualState belongs to one tensor (or fused bucket, identified by the runtime's integer id):
// the residual vector (same length as the gradient, starts at zero) plus `aux`, compressor state
// that must survive steps and checkpoints (PowerSGD's warm-start Q). `scratch` is per-step
// working memory and is not saved.
//
// ResidualMemory maps tensor ids to states and serialises all of them for a checkpoint. A saved
// checkpoint records the compressor configuration it was made with; restoring it under another
// configuration is an error, because the residual of one compressor is meaningless to another.
//
// Threading: not thread-safe; the runtime gives each state to one thread at a time.
#ifndef OVERLAP_COMPRESSION_RESIDUAL_H_
#define OVERLAP_COMPRESSION_RESIDUAL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace overlap {
namespace compress {

class ResidualState {
 public:
  ResidualState(int64_t tensor_id, size_t num_elements)
      : tensor_id_(tensor_id), residual_(num_elements, 0.0f) {}

  int64_t tensor_id() const { return tensor_id_; }
  size_t size() const { return residual_.size(); }

  absl::Span<float> residual() { return absl::MakeSpan(residual_); }
  absl::Span<const float> residual() const { return absl::MakeConstSpan(residual_); }

  // Compressor state saved with the checkpoint (PowerSGD: Q).
  std::vector<float>& aux() { return aux_; }
  const std::vector<float>& aux() const { return aux_; }

  // Working memory reused across steps, never saved (PowerSGD: padded matrix and P).
  std::vector<float>& scratch() { return scratch_; }
  const std::vector<float>& scratch() const { return scratch_; }

 private:
  int64_t tensor_id_;
  std::vector<float> residual_;
  std::vector<float> aux_;
  std::vector<float> scratch_;
};

class ResidualMemory {
 public:
  // `config` is the canonical compressor configuration (Compressor::config().ToString()).
  explicit ResidualMemory(std::string config) : config_(std::move(config)) {}

  // The state of `tensor_id`, created zeroed on first use. InvalidArgument when the tensor was
  // seen before with a different number of elements (a shape change would misalign the residual).
  absl::StatusOr<ResidualState*> Get(int64_t tensor_id, size_t num_elements);

  // Null when the tensor has no state yet.
  const ResidualState* Find(int64_t tensor_id) const;
  // Frees the tensor's state; its next Get starts from zeros. A no-op when it has none.
  void Erase(int64_t tensor_id) { states_.erase(tensor_id); }
  size_t num_tensors() const { return states_.size(); }

  // Binary snapshot of every state (residual and aux, not scratch) plus the configuration.
  std::string Save() const;

  // Replaces all states with the snapshot. InvalidArgument when the bytes are truncated or not a
  // snapshot, FailedPrecondition when it was saved under another compressor configuration. On
  // error the memory is unchanged.
  absl::Status Restore(absl::string_view snapshot);

 private:
  std::string config_;
  std::map<int64_t, std::unique_ptr<ResidualState>> states_;  // ordered: Save() is deterministic
};

}  // namespace compress
}  // namespace overlap

#endif  // OVERLAP_COMPRESSION_RESIDUAL_H_
