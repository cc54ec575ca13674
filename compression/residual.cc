#include "compression/residual.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace overlap {
namespace compress {
namespace {

// Snapshot layout, host byte order (checkpoints are restored on the same kind of machine):
//   magic "OVLRES01" | u64 config length | config | u64 tensor count |
//   per tensor: i64 id | u64 n | n x f32 residual | u64 m | m x f32 aux
constexpr char kMagic[8] = {'O', 'V', 'L', 'R', 'E', 'S', '0', '1'};

template <typename T>
void Put(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void PutFloats(std::string& out, const float* data, size_t n) {
  Put(out, static_cast<uint64_t>(n));
  if (n > 0) out.append(reinterpret_cast<const char*>(data), n * sizeof(float));  // data may be null
}

// Reads from a snapshot, failing (not crashing) on truncation.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}

  template <typename T>
  bool Get(T* value) {
    if (bytes_.size() < sizeof(T)) return false;
    std::memcpy(value, bytes_.data(), sizeof(T));
    bytes_.remove_prefix(sizeof(T));
    return true;
  }

  bool GetBytes(size_t n, absl::string_view* out) {
    if (bytes_.size() < n) return false;
    *out = bytes_.substr(0, n);
    bytes_.remove_prefix(n);
    return true;
  }

  bool GetFloats(std::vector<float>* out) {
    uint64_t n;
    if (!Get(&n) || n > bytes_.size() / sizeof(float)) return false;
    out->resize(n);
    if (n == 0) return true;  // an empty vector's data() may be null, which memcpy must not get
    std::memcpy(out->data(), bytes_.data(), n * sizeof(float));
    bytes_.remove_prefix(n * sizeof(float));
    return true;
  }

  bool done() const { return bytes_.empty(); }

 private:
  absl::string_view bytes_;
};

}  // namespace

absl::StatusOr<ResidualState*> ResidualMemory::Get(int64_t tensor_id, size_t num_elements) {
  auto it = states_.find(tensor_id);
  if (it == states_.end()) {
    it = states_.emplace(tensor_id, std::make_unique<ResidualState>(tensor_id, num_elements)).first;
  } else if (it->second->size() != num_elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("residual of tensor ", tensor_id, " has ", it->second->size(),
                     " elements but the tensor now has ", num_elements,
                     "; a tensor's size must not change while compression keeps its residual"));
  }
  return it->second.get();
}

const ResidualState* ResidualMemory::Find(int64_t tensor_id) const {
  auto it = states_.find(tensor_id);
  return it == states_.end() ? nullptr : it->second.get();
}

std::string ResidualMemory::Save() const {
  std::string out(kMagic, sizeof(kMagic));
  Put(out, static_cast<uint64_t>(config_.size()));
  out += config_;
  Put(out, static_cast<uint64_t>(states_.size()));
  for (const auto& [id, state] : states_) {
    Put(out, id);
    PutFloats(out, state->residual().data(), state->size());
    PutFloats(out, state->aux().data(), state->aux().size());
  }
  return out;
}

absl::Status ResidualMemory::Restore(absl::string_view snapshot) {
  auto corrupt = [](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("residual checkpoint is not a valid snapshot: ", what));
  };
  Reader in(snapshot);
  absl::string_view magic, config;
  uint64_t config_size, count;
  if (!in.GetBytes(sizeof(kMagic), &magic) ||
      std::memcmp(magic.data(), kMagic, sizeof(kMagic)) != 0) {
    return corrupt("bad magic (expected OVLRES01)");
  }
  if (!in.Get(&config_size) || !in.GetBytes(config_size, &config)) return corrupt("truncated");
  if (config != config_) {
    return absl::FailedPreconditionError(
        absl::StrCat("residual checkpoint was saved with compressor '", config,
                     "' but this run uses '", config_, "'"));
  }
  if (!in.Get(&count)) return corrupt("truncated");
  std::map<int64_t, std::unique_ptr<ResidualState>> states;
  for (uint64_t i = 0; i < count; ++i) {
    int64_t id;
    std::vector<float> residual, aux;
    if (!in.Get(&id) || !in.GetFloats(&residual) || !in.GetFloats(&aux)) {
      return corrupt(absl::StrCat("truncated in tensor entry ", i, " of ", count));
    }
    auto state = std::make_unique<ResidualState>(id, residual.size());
    std::copy(residual.begin(), residual.end(), state->residual().begin());
    state->aux() = std::move(aux);
    if (!states.emplace(id, std::move(state)).second) {
      return corrupt(absl::StrCat("tensor ", id, " appears twice"));
    }
  }
  if (!in.done()) return corrupt("trailing bytes after the last tensor");
  states_ = std::move(states);
  return absl::OkStatus();
}

}  // namespace compress
}  // namespace overlap
