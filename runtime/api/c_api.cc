// The C ABI of runtime/c_api.h: converts between C structs and the C++ API of overlap.h.
#include "runtime/c_api.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "collectives/buffer_ops.h"
#include "collectives/nccl_executor.h"
#include "runtime/api/handle_state.h"
#include "runtime/api/json_escape.h"
#include "runtime/overlap.h"
#include "runtime/planes/compression_stage.h"
#include "runtime/planes/cuda_compression.h"

struct overlap_handle {
  overlap::Handle handle;
};

namespace {

thread_local std::string last_error;
thread_local std::string stats_json;
thread_local std::string schedule_json;
thread_local std::string saved_state;
thread_local std::string config_json;

int Fail(const absl::Status& status) {
  if (status.ok()) return 0;
  last_error = std::string(status.message());
  return static_cast<int>(status.code());
}

int InvalidArgument(const std::string& what) {
  return Fail(absl::InvalidArgumentError(absl::StrCat("rank ", overlap::Rank(), ": ", what)));
}

// Checks the C description before it becomes a Tensor; the runtime checks the rest.
int ToTensor(const char* op, const char* name, const overlap_tensor* in, overlap::Tensor* out) {
  if (in == nullptr) return InvalidArgument(absl::StrCat(op, " '", name, "': null tensor"));
  if (in->ndim < 0 || (in->ndim > 0 && in->shape == nullptr) || in->capacity_bytes < 0) {
    return InvalidArgument(absl::StrCat(op, " '", name, "': malformed tensor description (ndim ",
                                        in->ndim, ", capacity ", in->capacity_bytes, ")"));
  }
  out->data = in->data;
  out->capacity_bytes = static_cast<size_t>(in->capacity_bytes);
  out->dtype = static_cast<overlap::DataType>(in->dtype);
  out->shape.assign(in->shape, in->shape + in->ndim);
  if (in->device_kind != static_cast<int32_t>(overlap::DeviceKind::kCpu) &&
      in->device_kind != static_cast<int32_t>(overlap::DeviceKind::kCuda)) {
    return InvalidArgument(
        absl::StrCat(op, " '", name, "': unknown device kind ", in->device_kind));
  }
  out->device.kind = static_cast<overlap::DeviceKind>(in->device_kind);
  out->device.index = in->device_index;
  out->stream = in->stream;
  return 0;
}

int Return(absl::StatusOr<overlap::Handle> handle, overlap_handle** out) {
  if (!handle.ok()) return Fail(handle.status());
  *out = new overlap_handle{*std::move(handle)};
  return 0;
}

const char* Str(const char* s) { return s == nullptr ? "" : s; }

overlap::AllreduceOptions AllreduceOptionsOf(int32_t op, double prescale, double postscale,
                                             const char* compression) {
  overlap::AllreduceOptions options;
  options.op = static_cast<overlap::ReduceOp>(op);
  options.prescale = prescale;
  options.postscale = postscale;
  options.compression = Str(compression);
  return options;
}

// The allreduce entry points differ only in their options.
int SubmitAllreduce(const char* name, const overlap_tensor* input, const overlap_tensor* output,
                    const overlap::AllreduceOptions& options, overlap_handle** handle) {
  overlap::Tensor in, out;
  if (int rc = ToTensor("allreduce", Str(name), input, &in)) return rc;
  if (int rc = ToTensor("allreduce", Str(name), output, &out)) return rc;
  return Return(overlap::Allreduce(Str(name), in, out, options), handle);
}

}  // namespace

extern "C" {

int overlap_c_api_version(void) { return OVERLAP_C_API_VERSION; }

const char* overlap_last_error(void) { return last_error.c_str(); }

int overlap_init(void) { return Fail(overlap::Init()); }

int overlap_init_with_settings(int32_t count, const char* const* names, const char* const* values) {
  if (count < 0 || (count > 0 && (names == nullptr || values == nullptr))) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("overlap_init_with_settings: malformed settings (count ", count, ")")));
  }
  std::vector<overlap::Config::Setting> settings;
  for (int32_t i = 0; i < count; ++i) {
    if (names[i] == nullptr || values[i] == nullptr) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("overlap_init_with_settings: setting ", i, " is null")));
    }
    settings.emplace_back(names[i], values[i]);
  }
  return Fail(overlap::InitWithSettings(settings));
}

const char* overlap_config_json(void) {
  absl::StatusOr<overlap::Config> config = overlap::CurrentConfig();
  if (!config.ok()) return nullptr;
  config_json = "{";
  for (const overlap::Config::Setting& setting : config->AsSettings()) {
    if (config_json.size() > 1) config_json += ",";
    absl::StrAppend(&config_json, "\"", overlap::JsonEscape(setting.first), "\":\"",
                    overlap::JsonEscape(setting.second), "\"");
  }
  config_json += "}";
  return config_json.c_str();
}
int overlap_shutdown(void) { return Fail(overlap::Shutdown()); }
int overlap_abort(const char* reason) {
  overlap::Abort(reason != nullptr ? reason : "aborted");
  return Fail(absl::OkStatus());
}
int overlap_is_initialized(void) { return overlap::IsInitialized() ? 1 : 0; }
int overlap_rank(void) { return overlap::Rank(); }
int overlap_size(void) { return overlap::Size(); }
int overlap_local_rank(void) { return overlap::LocalRank(); }
int overlap_local_size(void) { return overlap::LocalSize(); }

int overlap_start_forward(void) { return Fail(overlap::StartForward()); }
int overlap_start_backward(void) { return Fail(overlap::StartBackward()); }
int overlap_start_update(void) { return Fail(overlap::StartUpdate()); }
int overlap_note_update_ms(double ms) { return Fail(overlap::NoteUpdateTime(ms)); }

int overlap_start_timeline(const char* path) { return Fail(overlap::StartTimeline(Str(path))); }
int overlap_stop_timeline(void) { return Fail(overlap::StopTimeline()); }

int overlap_allreduce_flags(int32_t process_set, const char* name, const overlap_tensor* input,
                            const overlap_tensor* output, int32_t op, double prescale,
                            double postscale, const char* compression, int32_t flags,
                            overlap_handle** handle) {
  overlap::AllreduceOptions options = AllreduceOptionsOf(op, prescale, postscale, compression);
  options.process_set = process_set;
  options.plan_may_delay = (flags & OVERLAP_ALLREDUCE_GRADIENT) != 0;
  options.independent_of_results = (flags & OVERLAP_ALLREDUCE_INDEPENDENT_OF_RESULTS) != 0;
  options.looks_ahead = (flags & OVERLAP_ALLREDUCE_LOOKS_AHEAD) != 0;
  return SubmitAllreduce(name, input, output, options, handle);
}

int overlap_allreduce_ps(int32_t process_set, const char* name, const overlap_tensor* input,
                         const overlap_tensor* output, int32_t op, double prescale,
                         double postscale, const char* compression, overlap_handle** handle) {
  return overlap_allreduce_flags(process_set, name, input, output, op, prescale, postscale,
                                 compression, 0, handle);
}

int overlap_allreduce_gradient(int32_t process_set, const char* name, const overlap_tensor* input,
                               const overlap_tensor* output, int32_t op, double prescale,
                               double postscale, const char* compression, overlap_handle** handle) {
  return overlap_allreduce_flags(process_set, name, input, output, op, prescale, postscale,
                                 compression, OVERLAP_ALLREDUCE_GRADIENT, handle);
}

int overlap_allreduce(const char* name, const overlap_tensor* input, const overlap_tensor* output,
                      int32_t op, double prescale, double postscale, const char* compression,
                      overlap_handle** handle) {
  return overlap_allreduce_ps(0, name, input, output, op, prescale, postscale, compression, handle);
}

int overlap_allreduce_delayed(const char* name, const overlap_tensor* input,
                              const overlap_tensor* output, int32_t op, double prescale,
                              double postscale, const char* compression, int32_t delay,
                              int32_t period, int32_t phase, overlap_handle** handle) {
  overlap::AllreduceOptions options = AllreduceOptionsOf(op, prescale, postscale, compression);
  options.delay = delay;
  options.period = period;
  options.phase = phase;
  return SubmitAllreduce(name, input, output, options, handle);
}

int overlap_grouped_allreduce_ps(int32_t process_set, int32_t count, const char* const* names,
                                 const overlap_tensor* inputs, const overlap_tensor* outputs,
                                 int32_t op, double prescale, double postscale,
                                 const char* compression, overlap_handle** handle) {
  if (count <= 0 || names == nullptr || inputs == nullptr || outputs == nullptr) {
    return InvalidArgument(
        absl::StrCat("grouped allreduce: ", count, " tensors (need at least 1)"));
  }
  std::vector<std::string> tensor_names;
  std::vector<overlap::Tensor> ins(static_cast<size_t>(count)), outs(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) {
    tensor_names.push_back(Str(names[i]));
    if (int rc = ToTensor("grouped allreduce", Str(names[i]), &inputs[i], &ins[i])) return rc;
    if (int rc = ToTensor("grouped allreduce", Str(names[i]), &outputs[i], &outs[i])) return rc;
  }
  overlap::AllreduceOptions options = AllreduceOptionsOf(op, prescale, postscale, compression);
  options.process_set = process_set;
  return Return(overlap::GroupedAllreduce(tensor_names, ins, outs, options), handle);
}

int overlap_grouped_allreduce(int32_t count, const char* const* names, const overlap_tensor* inputs,
                              const overlap_tensor* outputs, int32_t op, double prescale,
                              double postscale, const char* compression, overlap_handle** handle) {
  return overlap_grouped_allreduce_ps(0, count, names, inputs, outputs, op, prescale, postscale,
                                      compression, handle);
}

int overlap_allgather_ps(int32_t process_set, const char* name, const overlap_tensor* input,
                         overlap_handle** handle) {
  overlap::Tensor in;
  if (int rc = ToTensor("allgather", Str(name), input, &in)) return rc;
  overlap::AllgatherOptions options;
  options.process_set = process_set;
  return Return(overlap::Allgather(Str(name), in, options), handle);
}

int overlap_allgather(const char* name, const overlap_tensor* input, overlap_handle** handle) {
  return overlap_allgather_ps(0, name, input, handle);
}

int overlap_broadcast_ps(int32_t process_set, const char* name, const overlap_tensor* input,
                         const overlap_tensor* output, int32_t root, overlap_handle** handle) {
  overlap::Tensor in, out;
  if (int rc = ToTensor("broadcast", Str(name), input, &in)) return rc;
  if (int rc = ToTensor("broadcast", Str(name), output, &out)) return rc;
  overlap::BroadcastOptions options;
  options.root = root;
  options.process_set = process_set;
  return Return(overlap::Broadcast(Str(name), in, out, options), handle);
}

int overlap_broadcast(const char* name, const overlap_tensor* input, const overlap_tensor* output,
                      int32_t root, overlap_handle** handle) {
  return overlap_broadcast_ps(0, name, input, output, root, handle);
}

int overlap_reducescatter_ps(int32_t process_set, const char* name, const overlap_tensor* input,
                             int32_t op, double prescale, double postscale,
                             overlap_handle** handle) {
  overlap::Tensor in;
  if (int rc = ToTensor("reducescatter", Str(name), input, &in)) return rc;
  overlap::ReduceScatterOptions options;
  options.op = static_cast<overlap::ReduceOp>(op);
  options.prescale = prescale;
  options.postscale = postscale;
  options.process_set = process_set;
  return Return(overlap::ReduceScatter(Str(name), in, options), handle);
}

int overlap_reducescatter(const char* name, const overlap_tensor* input, int32_t op,
                          double prescale, double postscale, overlap_handle** handle) {
  return overlap_reducescatter_ps(0, name, input, op, prescale, postscale, handle);
}

int overlap_alltoall_ps(int32_t process_set, const char* name, const overlap_tensor* input,
                        const int64_t* splits, int32_t nsplits, overlap_handle** handle) {
  overlap::Tensor in;
  if (int rc = ToTensor("alltoall", Str(name), input, &in)) return rc;
  overlap::AlltoallOptions options;
  if (splits != nullptr && nsplits > 0) options.splits.assign(splits, splits + nsplits);
  options.process_set = process_set;
  return Return(overlap::Alltoall(Str(name), in, options), handle);
}

int overlap_alltoall(const char* name, const overlap_tensor* input, const int64_t* splits,
                     int32_t nsplits, overlap_handle** handle) {
  return overlap_alltoall_ps(0, name, input, splits, nsplits, handle);
}

int overlap_barrier_ps(int32_t process_set, overlap_handle** handle) {
  return Return(overlap::Barrier(process_set), handle);
}
int overlap_barrier(overlap_handle** handle) { return overlap_barrier_ps(0, handle); }
int overlap_join(overlap_handle** handle) { return Return(overlap::Join(), handle); }

int overlap_add_process_set(const int32_t* ranks, int32_t count, int32_t* id) {
  if (id == nullptr || count < 0 || (count > 0 && ranks == nullptr)) {
    return InvalidArgument(absl::StrCat("add_process_set: ", count, " ranks at ",
                                        ranks == nullptr ? "null" : "an array",
                                        id == nullptr ? ", null id" : ""));
  }
  absl::StatusOr<int> added = overlap::AddProcessSet(std::vector<int>(ranks, ranks + count));
  if (!added.ok()) return Fail(added.status());
  *id = *added;
  return 0;
}

int overlap_remove_process_set(int32_t id) { return Fail(overlap::RemoveProcessSet(id)); }

int overlap_process_set_rank(int32_t id, int32_t* rank) {
  absl::StatusOr<int> r = overlap::ProcessSetRank(id);
  if (!r.ok()) return Fail(r.status());
  *rank = *r;
  return 0;
}

int overlap_process_set_size(int32_t id, int32_t* size) {
  absl::StatusOr<int> n = overlap::ProcessSetSize(id);
  if (!n.ok()) return Fail(n.status());
  *size = *n;
  return 0;
}

int overlap_process_set_ranks(int32_t id, int32_t* ranks, int32_t max, int32_t* count) {
  absl::StatusOr<std::vector<int>> all = overlap::ProcessSetRanks(id);
  if (!all.ok()) return Fail(all.status());
  *count = static_cast<int32_t>(all->size());
  for (int32_t i = 0; i < *count && i < max; ++i) ranks[i] = (*all)[static_cast<size_t>(i)];
  return 0;
}

int32_t overlap_process_set_ids(int32_t* ids, int32_t max) {
  const std::vector<int> all = overlap::ProcessSetIds();
  const int32_t n = static_cast<int32_t>(all.size());
  for (int32_t i = 0; i < n && i < max; ++i) ids[i] = all[static_cast<size_t>(i)];
  return n;
}

int overlap_handle_poll(const overlap_handle* handle) {
  return handle != nullptr && handle->handle.Poll() ? 1 : 0;
}

int overlap_handle_has_update(const overlap_handle* handle) {
  return handle == nullptr || handle->handle.has_update() ? 1 : 0;
}

int overlap_handle_wait(const overlap_handle* handle, double timeout_s) {
  if (handle == nullptr) return InvalidArgument("wait on a null handle");
  if (timeout_s < 0) return Fail(handle->handle.Wait());
  return Fail(handle->handle.Wait(absl::Seconds(timeout_s)));
}

namespace {
// The running runtime's wait bound, or the defaults' (handle_state.h).
overlap::internal::WaitBound CurrentWaitBound() {
  absl::StatusOr<overlap::Config> config = overlap::CurrentConfig();
  if (!config.ok()) return {};
  return {config->stall_timeout_s, config->collective_timeout_s};
}
}  // namespace

int overlap_wait_bound(double* bound_s, double* stall_timeout_s, double* collective_timeout_s) {
  const overlap::internal::WaitBound bound = CurrentWaitBound();
  if (bound_s != nullptr) *bound_s = absl::ToDoubleSeconds(bound.bound());
  if (stall_timeout_s != nullptr) *stall_timeout_s = bound.stall_timeout_s;
  if (collective_timeout_s != nullptr) *collective_timeout_s = bound.collective_timeout_s;
  return 0;
}

int overlap_wait_expired(const char* what, double waited_s) {
  return Fail(CurrentWaitBound().Expired(overlap::Rank(), Str(what), absl::Seconds(waited_s)));
}

int overlap_handles_wait(overlap_handle* const* handles, int32_t n, double timeout_s,
                         int32_t* has_update, int32_t* first_not_ok, int32_t* running) {
  if (running != nullptr) *running = 0;
  if (n < 0 || (n > 0 && handles == nullptr)) {
    return InvalidArgument(absl::StrCat("wait on ", n, " handles", n < 0 ? "" : " at null"));
  }
  const absl::Time deadline =
      timeout_s < 0 ? absl::InfiniteFuture() : absl::Now() + absl::Seconds(timeout_s);
  for (int32_t i = 0; i < n; ++i) {
    if (first_not_ok != nullptr) *first_not_ok = i;
    const overlap_handle* handle = handles[i];
    if (handle == nullptr) return InvalidArgument(absl::StrCat("wait on null handle ", i));
    absl::Status s =
        timeout_s < 0 ? handle->handle.Wait()
                      : handle->handle.Wait(std::max(absl::ZeroDuration(), deadline - absl::Now()));
    if (absl::IsDeadlineExceeded(s)) {
      // The wait's own timeout, unless the operation has ended: then its own status.
      if (!handle->handle.Poll()) {
        if (running != nullptr) *running = 1;
        return Fail(s);
      }
      s = handle->handle.Wait(absl::ZeroDuration());
    }
    if (!s.ok()) return Fail(s);
    if (has_update != nullptr) has_update[i] = handle->handle.has_update() ? 1 : 0;
  }
  if (first_not_ok != nullptr) *first_not_ok = -1;
  return 0;
}

int overlap_handle_output(const overlap_handle* handle, const void** data, int32_t* dtype,
                          int32_t* ndim, int64_t* shape, int32_t max_ndim) {
  if (handle == nullptr) return InvalidArgument("output of a null handle");
  const overlap::Tensor& out = handle->handle.output();
  if (static_cast<int32_t>(out.shape.size()) > max_ndim) {
    return InvalidArgument(absl::StrCat("'", handle->handle.name(), "': output has ",
                                        out.shape.size(), " dimensions, room for ", max_ndim));
  }
  *data = out.data;
  *dtype = static_cast<int32_t>(out.dtype);
  *ndim = static_cast<int32_t>(out.shape.size());
  for (size_t i = 0; i < out.shape.size(); ++i) shape[i] = out.shape[i];
  return 0;
}

int overlap_cuda_device_count(void) { return overlap::CudaDeviceCount(); }
int overlap_cuda_built(void) { return overlap::BuiltWithCuda() ? 1 : 0; }
int overlap_nccl_version(void) { return overlap::NcclVersion(); }
int overlap_cuda_compresses(const char* spec) {
  if (spec == nullptr) return 0;
  absl::StatusOr<std::string> canonical = overlap::CompressionStage::Canonical(spec);
  return canonical.ok() && overlap::CudaCompressionSupports(*canonical).ok() ? 1 : 0;
}

int overlap_handle_copy_output(const overlap_handle* handle, void* dst, int64_t bytes) {
  if (handle == nullptr) return InvalidArgument("output of a null handle");
  const overlap::Tensor& out = handle->handle.output();
  if (bytes < 0 || static_cast<size_t>(bytes) != out.ByteSize()) {
    return InvalidArgument(absl::StrCat("'", handle->handle.name(), "': output holds ",
                                        out.ByteSize(), " bytes, not ", bytes));
  }
  if (bytes == 0) return 0;
  absl::StatusOr<std::unique_ptr<overlap::BufferOps>> ops =
      overlap::CreateBufferOps(out.device, nullptr);
  if (!ops.ok()) return Fail(ops.status());
  const overlap::CopySlice slice{dst, out.data, out.NumElements()};
  absl::Status s = (*ops)->Copy({&slice, 1}, out.dtype, overlap::CopyScaling{});
  absl::StatusOr<std::unique_ptr<overlap::Work>> fence =
      s.ok() ? (*ops)->Fence() : absl::StatusOr<std::unique_ptr<overlap::Work>>(s);
  if (!fence.ok()) return Fail(fence.status());
  while (true) {  // a device copy of one tensor: microseconds to milliseconds
    absl::StatusOr<bool> done = (*fence)->Test();
    if (!done.ok()) return Fail(done.status());
    if (*done) return 0;
    std::this_thread::yield();
  }
}

int32_t overlap_handle_received_splits(const overlap_handle* handle, int64_t* splits, int32_t max) {
  if (handle == nullptr) return 0;
  const std::vector<int64_t>& received = handle->handle.received_splits();
  const int32_t n = static_cast<int32_t>(received.size());
  for (int32_t i = 0; i < n && i < max; ++i) splits[i] = received[static_cast<size_t>(i)];
  return n;
}

void overlap_handle_free(overlap_handle* handle) { delete handle; }

const char* overlap_stats_json(void) {
  const overlap::RuntimeStats s = overlap::Stats();
  stats_json = absl::StrFormat(
      "{\"negotiation_rounds\":%d,\"negotiated_operations\":%d,\"delayed_bytes\":%d,\"plan_buffer_"
      "bytes\":%d,\"planned_launches\":%d,\"plans_frozen\":%d,"
      "\"plans_dropped\":%d,\"planned_tensors\":%d,\"planned_units\":%d,\"steps\":%d,\"planner\":"
      "\"%s\","
      "\"plan_buckets\":%d,\"plan_compressed_buckets\":%d,\"plan_two_stage_buckets\":%d,"
      "\"predicted_step_ms\":%.6g,\"plan_"
      "adopted_step\":%d,"
      "\"plans_scheduled\":%d,\"plans_refused\":%d,\"plan_layerwise_update\":%s,"
      "\"plan_mean_staleness\":%.6g,\"plan_update_cycle\":%d,"
      "\"fitted_alpha_us\":%.6g,\"fitted_beta_us_per_mb\":%.6g,"
      "\"fitted_two_stage_alpha_us\":%.6g,\"fitted_two_stage_beta_us_per_mb\":%.6g,"
      "\"link_cost_fits\":%d,"
      "\"link_cost_reuses\":%d,\"plan_drifts_kept\":%d,\"plan_trials\":\"%s\",\"plan_"
      "trials_pending\":%s,"
      "\"cuda_executor\":\"%s\",\"hierarchy_hosts\":%d,\"comm_compute_ratio\":%.6g,"
      "\"link_probes\":%d,\"weighted_allreduces\":%d,\"link_rates\":\"%s\","
      "\"update_times_noted\":%d,\"update_ms_noted\":%.6g}",
      s.negotiation_rounds, s.negotiated_operations, s.delayed_bytes, s.plan_buffer_bytes,
      s.planned_launches, s.plans_frozen, s.plans_dropped, s.planned_tensors, s.planned_units,
      s.steps, s.planner, s.plan_buckets, s.plan_compressed_buckets, s.plan_two_stage_buckets,
      s.predicted_step_ms, s.plan_adopted_step, s.plans_scheduled, s.plans_refused,
      s.plan_layerwise_update ? "true" : "false", s.plan_mean_staleness, s.plan_update_cycle,
      s.fitted_alpha_us, s.fitted_beta_us_per_mb, s.fitted_two_stage_alpha_us,
      s.fitted_two_stage_beta_us_per_mb, s.link_cost_fits, s.link_cost_reuses, s.plan_drifts_kept,
      s.plan_trials, s.plan_trials_pending ? "true" : "false", s.cuda_executor, s.hierarchy_hosts,
      s.comm_compute_ratio, s.link_probes, s.weighted_allreduces, overlap::JsonEscape(s.link_rates),
      s.update_times_noted, s.update_ms_noted);
  return stats_json.c_str();
}

const char* overlap_plan_schedule_json(void) {
  const overlap::PlanSchedule schedule = overlap::CurrentPlanSchedule();
  schedule_json =
      absl::StrFormat("{\"generation\":%d,\"first_step\":%d,\"first_pass\":%d,\"tensors\":{",
                      schedule.generation, schedule.first_step, schedule.first_pass);
  bool first = true;
  for (const auto& [name, slices] : schedule.tensors) {
    absl::StrAppend(&schedule_json, first ? "" : ",", "\"", overlap::JsonEscape(name), "\":[");
    for (size_t i = 0; i < slices.size(); ++i) {
      const overlap::ScheduledSlice& s = slices[i];
      absl::StrAppendFormat(&schedule_json, "%s[%d,%d,%d,%d,%d]", i == 0 ? "" : ",", s.offset,
                            s.count, s.delay, s.period, s.phase);
    }
    absl::StrAppend(&schedule_json, "]");
    first = false;
  }
  absl::StrAppend(&schedule_json, "}}");
  return schedule_json.c_str();
}

int overlap_plan_clock(int64_t* generation, int64_t* step) {
  const overlap::PlanClock clock = overlap::CurrentPlanClock();
  if (generation != nullptr) *generation = clock.generation;
  if (step != nullptr) *step = clock.step;
  return 0;
}

int overlap_save_compression_state(const char** data, int64_t* size) {
  absl::StatusOr<std::string> state = overlap::SaveCompressionState();
  if (!state.ok()) return Fail(state.status());
  saved_state = *std::move(state);
  *data = saved_state.data();
  *size = static_cast<int64_t>(saved_state.size());
  return 0;
}

int overlap_restore_compression_state(const char* data, int64_t size) {
  if (data == nullptr && size > 0) return InvalidArgument("restore compression state: null data");
  return Fail(overlap::RestoreCompressionState(
      std::string(data == nullptr ? "" : data, static_cast<size_t>(size))));
}

}  // extern "C"
