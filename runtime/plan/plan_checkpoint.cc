// A scheduled plan's checkpoint (plan_checkpoint.h states the contract).
#include "runtime/plan/plan_checkpoint.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "scheduler/plan.h"

namespace overlap {
namespace {

// v2: each tensor's agreed request carries plan_may_delay.
constexpr char kMagic[] = "overlap-plan-v2";
constexpr char kMagicV1[] = "overlap-plan-v1";

absl::string_view AsBytes(const std::vector<uint8_t>& v) {
  return absl::string_view(reinterpret_cast<const char*>(v.data()), v.size());
}

absl::Status GetBytes(ByteReader* in, std::vector<uint8_t>* out) {
  std::string s;
  absl::Status status = in->GetString(&s);
  if (status.ok()) out->assign(s.begin(), s.end());
  return status;
}

absl::Status DecodeState(ByteReader* in, PlanDelays::State* state) {
  int64_t buckets = 0, results = 0;
  absl::Status s = in->GetI64(&state->passes);
  if (s.ok()) s = in->GetI64(&buckets);
  if (s.ok() && (buckets < 0 || static_cast<size_t>(buckets) > in->remaining())) {
    return absl::DataLossError(absl::StrCat("a bucket count of ", buckets));
  }
  if (s.ok()) state->residuals.resize(static_cast<size_t>(buckets));
  for (size_t b = 0; s.ok() && b < state->residuals.size(); ++b) {
    s = GetBytes(in, &state->residuals[b]);
  }
  if (s.ok()) s = in->GetI64(&results);
  if (s.ok() && (results < 0 || static_cast<size_t>(results) > in->remaining())) {
    return absl::DataLossError(absl::StrCat("a result count of ", results));
  }
  for (int64_t i = 0; s.ok() && i < results; ++i) {
    PlanDelays::State::Held held;
    int32_t bucket = 0;
    s = in->GetI32(&bucket);
    held.bucket = bucket;
    if (s.ok()) s = in->GetI64(&held.pass);
    if (s.ok()) s = GetBytes(in, &held.values);
    state->results.push_back(std::move(held));
  }
  return s;
}

}  // namespace

PlanCheckpoint MakePlanCheckpoint(const ExecutablePlan& plan, PlanDelays::State state,
                                  double step_ms, double predicted_step_ms) {
  PlanCheckpoint checkpoint;
  checkpoint.plan = plan.scheduled;
  for (const PlanEntry& e : plan.entries) checkpoint.tensors.push_back(*e.response);
  checkpoint.step_ms = step_ms;
  checkpoint.predicted_step_ms = predicted_step_ms;
  checkpoint.state = std::move(state);
  return checkpoint;
}

std::string EncodePlanCheckpoint(const PlanCheckpoint& c) {
  ByteWriter out;
  out.PutString(kMagic);
  out.PutString(c.plan);
  out.PutI64(static_cast<int64_t>(c.tensors.size()));
  for (const Response& r : c.tensors) EncodeResponse(r, &out);
  out.PutF64(c.step_ms);
  out.PutF64(c.predicted_step_ms);
  out.PutI64(c.state.passes);
  out.PutI64(static_cast<int64_t>(c.state.residuals.size()));
  for (const std::vector<uint8_t>& residual : c.state.residuals) out.PutString(AsBytes(residual));
  out.PutI64(static_cast<int64_t>(c.state.results.size()));
  for (const PlanDelays::State::Held& held : c.state.results) {
    out.PutI32(held.bucket);
    out.PutI64(held.pass);
    out.PutString(AsBytes(held.values));
  }
  return std::move(out.bytes());
}

absl::StatusOr<PlanCheckpoint> DecodePlanCheckpoint(absl::string_view bytes) {
  ByteReader in(bytes);
  PlanCheckpoint c;
  std::string magic;
  if (!in.GetString(&magic).ok() || magic != kMagic) {
    return absl::InvalidArgumentError(
        magic == kMagicV1
            ? "the plan's part was saved by an earlier version of overlap (overlap-plan-v1), "
              "whose requests do not say which tensors a plan may delay; resume without it (the "
              "job re-plans) or save it again with this version"
            : "the plan's part is not a plan checkpoint");
  }
  int64_t tensors = 0;
  absl::Status s = in.GetString(&c.plan);
  if (s.ok()) s = in.GetI64(&tensors);
  if (s.ok() && (tensors < 0 || static_cast<size_t>(tensors) > in.remaining())) {
    s = absl::DataLossError(absl::StrCat("a tensor count of ", tensors));
  }
  for (int64_t i = 0; s.ok() && i < tensors; ++i) {
    Response r;
    s = DecodeResponse(&in, &r);
    r.cache_id = -1;  // this process's negotiation has not cached it
    c.tensors.push_back(std::move(r));
  }
  if (s.ok()) s = in.GetF64(&c.step_ms);
  if (s.ok()) s = in.GetF64(&c.predicted_step_ms);
  if (s.ok()) s = DecodeState(&in, &c.state);
  if (s.ok() && !in.done()) s = absl::DataLossError("bytes after its end");
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the plan's part is damaged: ", s.message()));
  }
  return c;
}

absl::StatusOr<ExecutablePlan> CheckpointedPlan(const PlanCheckpoint& checkpoint,
                                                int num_channels) {
  absl::StatusOr<sched::Plan> plan = sched::Plan::Deserialize(checkpoint.plan);
  if (!plan.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the saved plan does not decode: ", plan.status().message()));
  }
  absl::flat_hash_map<std::string, PlanEntry> table;
  for (const Response& r : checkpoint.tensors) {
    table.emplace(r.name, PlanEntry{-1, std::make_shared<const Response>(r)});
  }
  absl::StatusOr<ExecutablePlan> executable = ScheduledPlan(*plan, table, num_channels);
  if (!executable.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the saved plan does not fit its saved tensors: ", executable.status().message()));
  }
  executable->Index();
  absl::Status fits = PlanDelays::Check(*executable, checkpoint.state);
  if (!fits.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the saved delayed state does not fit the saved plan: ", fits.message()));
  }
  return executable;
}

}  // namespace overlap
