#include "scheduler/plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace overlap::sched {

const char* WindowName(Window window) {
  return window == Window::kBackward ? "backward" : "next_forward";
}

int Plan::MaxDelay() const {
  int d = 0;
  for (const Bucket& b : buckets) {
    d = std::max(d, b.delay);
  }
  return d;
}

std::string Plan::ToJson() const {
  nlohmann::json out;
  out["planner"] = planner;
  out["model"] = model;
  out["staleness"] = staleness;
  out["layerwise_update"] = layerwise_update;
  out["budget_used"] = budget_used;
  out["buckets"] = nlohmann::json::array();
  for (const Bucket& b : buckets) {
    nlohmann::json bj;
    bj["op"] = CollectiveName(b.op);
    bj["channel"] = b.channel;
    bj["window"] = WindowName(b.window);
    bj["delay"] = b.delay;
    bj["lag"] = b.lag;
    bj["period"] = b.period;
    bj["phase"] = b.phase;
    bj["compressor"] = b.compressor;
    bj["ratio"] = b.ratio;
    bj["two_stage"] = b.two_stage;
    bj["bytes"] = b.bytes;
    bj["slices"] = nlohmann::json::array();
    for (const TensorSlice& s : b.slices) {
      bj["slices"].push_back(
          {{"tensor", s.tensor}, {"name", s.name}, {"offset", s.offset}, {"count", s.count}});
    }
    out["buckets"].push_back(bj);
  }
  // Names are bytes from the program (or another rank): ones that are not UTF-8 are printed
  // with U+FFFD instead of making dump() throw.
  return out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

namespace {

constexpr char kMagic[4] = {'O', 'V', 'P', 'L'};
// 2: buckets carry two_stage. Version 1 (before it) is still read.
constexpr uint32_t kVersion = 2;
// Bounds that keep a corrupt length field from allocating gigabytes.
constexpr uint64_t kMaxString = 1 << 16;
constexpr uint64_t kMaxBuckets = 1 << 22;
constexpr uint64_t kMaxSlices = 1 << 22;

class Writer {
 public:
  template <typename T>
  void Pod(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void Str(const std::string& s) {
    Pod<uint32_t>(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  template <typename T>
  absl::Status Pod(const char* field, T* v) {
    if (in_.size() - pos_ < sizeof(T)) {
      return Error(field, "truncated");
    }
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::Status Str(const char* field, std::string* s) {
    uint32_t n = 0;
    absl::Status st = Pod(field, &n);
    if (!st.ok()) {
      return st;
    }
    if (n > kMaxString || in_.size() - pos_ < n) {
      return Error(field, "bad string length");
    }
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  absl::Status Error(const char* field, absl::string_view cause) const {
    return absl::InvalidArgumentError(
        absl::StrCat("plan bytes: ", field, " at offset ", pos_, ": ", cause));
  }
  bool AtEnd() const { return pos_ == in_.size(); }

 private:
  absl::string_view in_;
  size_t pos_ = 0;
};

#define OVERLAP_RETURN_IF_ERROR(expr) \
  do {                                \
    absl::Status _st = (expr);        \
    if (!_st.ok()) return _st;        \
  } while (0)

}  // namespace

std::string Plan::Serialize() const {
  Writer w;
  for (char c : kMagic) {
    w.Pod(c);
  }
  w.Pod(kVersion);
  w.Str(planner);
  w.Str(model);
  w.Pod<int32_t>(staleness);
  w.Pod<uint8_t>(layerwise_update ? 1 : 0);
  w.Pod(budget_used);
  w.Pod<uint64_t>(buckets.size());
  for (const Bucket& b : buckets) {
    w.Pod<int32_t>(static_cast<int32_t>(b.op));
    w.Pod<int32_t>(b.channel);
    w.Pod<int32_t>(static_cast<int32_t>(b.window));
    w.Pod<int32_t>(b.delay);
    w.Pod<int32_t>(b.lag);
    w.Pod<int32_t>(b.period);
    w.Pod<int32_t>(b.phase);
    w.Str(b.compressor);
    w.Pod(b.ratio);
    w.Pod<uint8_t>(b.two_stage ? 1 : 0);
    w.Pod<int64_t>(b.bytes);
    w.Pod<uint64_t>(b.slices.size());
    for (const TensorSlice& s : b.slices) {
      w.Pod<int32_t>(s.tensor);
      w.Str(s.name);
      w.Pod<int64_t>(s.offset);
      w.Pod<int64_t>(s.count);
    }
  }
  return w.Take();
}

absl::StatusOr<Plan> Plan::Deserialize(absl::string_view bytes) {
  Reader r(bytes);
  char magic[4];
  for (char& c : magic) {
    OVERLAP_RETURN_IF_ERROR(r.Pod("magic", &c));
  }
  if (std::memcmp(magic, kMagic, 4) != 0) {
    return r.Error("magic", "not a serialized plan");
  }
  uint32_t version = 0;
  OVERLAP_RETURN_IF_ERROR(r.Pod("version", &version));
  if (version != kVersion && version != 1) {
    return r.Error("version", absl::StrCat("unsupported version ", version));
  }
  Plan plan;
  OVERLAP_RETURN_IF_ERROR(r.Str("planner", &plan.planner));
  OVERLAP_RETURN_IF_ERROR(r.Str("model", &plan.model));
  int32_t staleness = 0;
  OVERLAP_RETURN_IF_ERROR(r.Pod("staleness", &staleness));
  if (staleness < 0) {
    return r.Error("staleness", "negative");
  }
  plan.staleness = staleness;
  uint8_t layerwise = 0;
  OVERLAP_RETURN_IF_ERROR(r.Pod("layerwise_update", &layerwise));
  if (layerwise > 1) {
    return r.Error("layerwise_update", "not a boolean");
  }
  plan.layerwise_update = layerwise == 1;
  OVERLAP_RETURN_IF_ERROR(r.Pod("budget_used", &plan.budget_used));
  if (!std::isfinite(plan.budget_used)) {
    return r.Error("budget_used", "not finite");
  }
  uint64_t n = 0;
  OVERLAP_RETURN_IF_ERROR(r.Pod("bucket count", &n));
  if (n > kMaxBuckets || n > bytes.size()) {
    return r.Error("bucket count", "too large");
  }
  plan.buckets.resize(n);
  for (Bucket& b : plan.buckets) {
    int32_t op = 0, window = 0;
    OVERLAP_RETURN_IF_ERROR(r.Pod("op", &op));
    if (op < 0 || op > 2) {
      return r.Error("op", "unknown collective");
    }
    b.op = static_cast<Collective>(op);
    OVERLAP_RETURN_IF_ERROR(r.Pod("channel", &b.channel));
    OVERLAP_RETURN_IF_ERROR(r.Pod("window", &window));
    if (window < 0 || window > 1) {
      return r.Error("window", "unknown window");
    }
    b.window = static_cast<Window>(window);
    OVERLAP_RETURN_IF_ERROR(r.Pod("delay", &b.delay));
    OVERLAP_RETURN_IF_ERROR(r.Pod("lag", &b.lag));
    OVERLAP_RETURN_IF_ERROR(r.Pod("period", &b.period));
    OVERLAP_RETURN_IF_ERROR(r.Pod("phase", &b.phase));
    if (b.channel < 0 || b.delay < 0 || b.lag < 0 || b.lag > b.delay || b.period < 1 ||
        b.phase < 0 || b.phase >= b.period) {
      return r.Error("bucket", "channel, delay, lag, period or phase out of range");
    }
    OVERLAP_RETURN_IF_ERROR(r.Str("compressor", &b.compressor));
    OVERLAP_RETURN_IF_ERROR(r.Pod("ratio", &b.ratio));
    if (!(b.ratio > 0 && b.ratio <= 1)) {
      return r.Error("ratio", "must be in (0, 1]");
    }
    if (version >= 2) {
      uint8_t two_stage = 0;
      OVERLAP_RETURN_IF_ERROR(r.Pod("two_stage", &two_stage));
      if (two_stage > 1) {
        return r.Error("two_stage", "must be 0 or 1");
      }
      b.two_stage = two_stage == 1;
    }
    OVERLAP_RETURN_IF_ERROR(r.Pod("bytes", &b.bytes));
    uint64_t ns = 0;
    OVERLAP_RETURN_IF_ERROR(r.Pod("slice count", &ns));
    if (ns > kMaxSlices || ns > bytes.size()) {
      return r.Error("slice count", "too large");
    }
    b.slices.resize(ns);
    for (TensorSlice& s : b.slices) {
      OVERLAP_RETURN_IF_ERROR(r.Pod("slice tensor", &s.tensor));
      OVERLAP_RETURN_IF_ERROR(r.Str("slice name", &s.name));
      OVERLAP_RETURN_IF_ERROR(r.Pod("slice offset", &s.offset));
      OVERLAP_RETURN_IF_ERROR(r.Pod("slice count", &s.count));
      if (s.tensor < 0 || s.offset < 0 || s.count <= 0) {
        return r.Error("slice", "negative tensor index or offset, or empty slice");
      }
    }
  }
  if (!r.AtEnd()) {
    return r.Error("end", "trailing bytes after the last bucket");
  }
  return plan;
}

namespace {

// Sorted [offset, end) intervals must tile [0, count) exactly.
absl::Status CheckTiling(std::vector<std::pair<int64_t, int64_t>> parts, int64_t count,
                         const std::string& what) {
  std::sort(parts.begin(), parts.end());
  int64_t at = 0;
  for (const auto& [begin, end] : parts) {
    if (begin < at) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": elements from ", begin, " are covered twice"));
    }
    if (begin > at) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": elements [", at, ", ", begin, ") are not covered"));
    }
    at = end;
  }
  if (at != count) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": elements [", at, ", ", count, ") are not covered"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePlan(const Plan& plan, const Profile& profile, const CostModel& cost) {
  const size_t nt = profile.tensors.size();
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ar(nt), rs(nt), ag(nt);
  std::map<std::vector<std::tuple<int, int64_t, int64_t>>, size_t> reduce_scatters;
  for (size_t i = 0; i < plan.buckets.size(); ++i) {
    const Bucket& b = plan.buckets[i];
    auto error = [&](const std::string& cause) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan '", plan.planner, "' bucket ", i, ": ", cause));
    };
    if (b.channel < 0 || b.channel >= static_cast<int>(cost.channels.size())) {
      return error(absl::StrCat("channel ", b.channel, " does not exist (cost model has ",
                                cost.channels.size(), ")"));
    }
    if (b.delay < 0 || b.delay > plan.staleness) {
      return error(absl::StrCat("delay ", b.delay, " outside [0, staleness ", plan.staleness, "]"));
    }
    if (b.lag < 0 || b.lag > b.delay) {
      return error("lag must be in [0, delay]");
    }
    if (b.period < 1 || b.phase < 0 || b.phase >= b.period) {
      return error("period must be >= 1 and phase in [0, period)");
    }
    if (!(b.ratio > 0 && b.ratio <= 1)) {
      return error("ratio must be in (0, 1]");
    }
    if (b.two_stage && b.op != Collective::kAllreduce) {
      return error(absl::StrCat("a ", CollectiveName(b.op), " cannot run two-stage"));
    }
    if (b.two_stage && !cost.channels[b.channel].OffersTwoStage()) {
      return error(absl::StrCat("two-stage on channel ", b.channel,
                                ", which offers no two-stage allreduce"));
    }
    if (b.slices.empty()) {
      return error("no slices");
    }
    int64_t bytes = 0;
    std::vector<std::tuple<int, int64_t, int64_t>> key;
    for (const TensorSlice& s : b.slices) {
      if (s.tensor < 0 || s.tensor >= static_cast<int>(nt)) {
        return error(absl::StrCat("slice names tensor ", s.tensor, ", profile has ", nt));
      }
      const TensorInfo& t = profile.tensors[s.tensor];
      if (s.name != t.name) {
        return error(absl::StrCat("slice of tensor ", s.tensor, " is named '", s.name,
                                  "', the profile calls it '", t.name, "'"));
      }
      if (s.offset < 0 || s.count <= 0 || s.offset + s.count > t.count()) {
        return error(absl::StrCat("slice [", s.offset, ", +", s.count, ") outside tensor '", t.name,
                                  "' of ", t.count(), " elements"));
      }
      bytes += s.count * static_cast<int64_t>(DataTypeSize(t.dtype));
      key.emplace_back(s.tensor, s.offset, s.count);
      auto& into = b.op == Collective::kAllreduce       ? ar
                   : b.op == Collective::kReduceScatter ? rs
                                                        : ag;
      into[s.tensor].emplace_back(s.offset, s.offset + s.count);
    }
    if (bytes != b.bytes) {
      return error(absl::StrCat("bytes is ", b.bytes, " but the slices hold ", bytes));
    }
    if (b.op == Collective::kReduceScatter) {
      reduce_scatters[key] = i;
    } else if (b.op == Collective::kAllgather) {
      auto it = reduce_scatters.find(key);
      if (it == reduce_scatters.end()) {
        return error("allgather has no earlier reduce-scatter of the same slices");
      }
      const Bucket& r = plan.buckets[it->second];
      if (r.delay != b.delay || r.period != b.period || r.phase != b.phase || b.lag < r.lag) {
        return error("allgather's delay/period/phase differ from its reduce-scatter's");
      }
    }
  }
  for (size_t t = 0; t < nt; ++t) {
    const TensorInfo& tensor = profile.tensors[t];
    const std::string what = absl::StrCat("plan '", plan.planner, "' tensor '", tensor.name, "'");
    absl::Status s;
    if (!ar[t].empty()) {
      if (!rs[t].empty() || !ag[t].empty()) {
        return absl::InvalidArgumentError(what + ": mixes allreduce with reduce-scatter/allgather");
      }
      s = CheckTiling(ar[t], tensor.count(), what);
    } else {
      s = CheckTiling(rs[t], tensor.count(), what + " (reduce-scatter)");
      if (s.ok()) {
        s = CheckTiling(ag[t], tensor.count(), what + " (allgather)");
      }
    }
    if (!s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace overlap::sched
