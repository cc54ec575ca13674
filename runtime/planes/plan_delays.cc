// A scheduled plan's delayed updates and update periods (plan_delays.h states the contract).
#include "runtime/planes/plan_delays.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/scaling.h"
#include "runtime/planes/bucket_runner.h"

namespace overlap {

// Copies of one tensor held at once: up to delay + period + 1 (plan_delays.h).
static size_t MaxCopies(const ExecutablePlan& plan) {
  int most = 1;
  for (const ExecBucket& b : plan.buckets) most = std::max(most, b.delay + b.period + 1);
  return static_cast<size_t>(most);
}

PlanDelays::PlanDelays(std::shared_ptr<const ExecutablePlan> plan, int size,
                       std::function<void()> poke, BufferOps* device)
    : plan_(std::move(plan)),
      size_(size),
      poke_(std::move(poke)),
      copies_(MaxCopies(*plan_)),
      device_(device) {
  const size_t entries = plan_->entries.size();
  const size_t buckets = plan_->buckets.size();
  submitted_.assign(entries, 0);
  parked_.resize(entries);
  slice_offsets_.resize(buckets);
  members_.resize(buckets);
  residuals_.resize(buckets);
  results_.resize(buckets);
  device_residuals_.resize(buckets);
  device_copies_.resize(entries);
  for (size_t b = 0; b < buckets; ++b) {
    int64_t offset = 0;
    for (const ExecSlice& s : plan_->buckets[b].slices) {
      slice_offsets_[b].push_back(offset);
      offset += s.count;
      std::vector<int>& members = members_[b];
      if (std::find(members.begin(), members.end(), s.entry) == members.end()) {
        members.push_back(s.entry);
      }
    }
  }
}

// ScheduledPlan made every slice of a bucket share one dtype.
static DataType BucketDtype(const ExecutablePlan& plan, int bucket) {
  const ExecBucket& b = plan.buckets[static_cast<size_t>(bucket)];
  return plan.entries[static_cast<size_t>(b.slices.front().entry)]
      .response->request.tensors[0]
      .dtype;
}

DataType PlanDelays::DtypeOf(int bucket) const { return BucketDtype(*plan_, bucket); }

bool PlanDelays::EntryOnDevice(int entry) const {
  return plan_->entries[static_cast<size_t>(entry)].response->request.device == DeviceKind::kCuda;
}

absl::Status PlanDelays::NoDevice() const {
  return absl::FailedPreconditionError(
      "the delayed plan holds CUDA tensors but has no device buffer operations (the plan's CUDA "
      "plane could not be set up)");
}

bool PlanDelays::BucketOnDevice(int bucket) const {
  // ScheduledPlan gives every bucket tensors of one device.
  return EntryOnDevice(plan_->buckets[static_cast<size_t>(bucket)].slices.front().entry);
}

void PlanDelays::Hold(int64_t bytes, bool on_device) {
  held_bytes_ += bytes;
  if (on_device) held_device_bytes_ += bytes;
}

absl::Status PlanDelays::DeviceToHost(const DeviceMemory& from, std::vector<uint8_t>* to) const {
  if (device_ == nullptr) return NoDevice();
  to->resize(from.size());
  absl::Status s = device_->CopyToHost(to->data(), from.data(), from.size());
  if (!s.ok()) return s;
  absl::StatusOr<std::unique_ptr<Work>> fence = device_->Fence();
  if (!fence.ok()) return fence.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (;;) {
    absl::StatusOr<bool> done = (*fence)->Test();
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(device_->device().ToString(),
                       ": copying the delayed plan's state to the host took over 60 s"));
    }
    absl::SleepFor(absl::Microseconds(50));
  }
}

std::shared_ptr<DeviceMemory> PlanDelays::HostToDevice(const std::vector<uint8_t>& values) {
  if (device_ == nullptr) {
    device_error_ = NoDevice();
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> memory = device_->Allocate(values.size());
  if (!memory.ok()) {
    device_error_ = memory.status();
    return nullptr;
  }
  std::shared_ptr<DeviceMemory> out(std::move(*memory));
  absl::Status s = device_->CopyFromHost(out->data(), values.data(), values.size());
  // Waited for below, so that `values` may go: read back (a round trip) into a scratch copy.
  std::vector<uint8_t> check;
  if (s.ok()) s = DeviceToHost(*out, &check);
  if (!s.ok()) device_error_ = s;
  return out;
}

int64_t PlanDelays::PackedBytes(const ExecutablePlan& plan, int bucket) {
  int64_t count = 0;
  for (const ExecSlice& s : plan.buckets[static_cast<size_t>(bucket)].slices) count += s.count;
  return count * static_cast<int64_t>(DataTypeSize(BucketDtype(plan, bucket)));
}

absl::Status PlanDelays::Check(const ExecutablePlan& plan, const State& state) {
  const int buckets = static_cast<int>(plan.buckets.size());
  auto bad = [](int bucket, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("plan bucket ", bucket, ": ", why));
  };
  if (state.passes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("a negative pass count (", state.passes, ")"));
  }
  if (state.residuals.size() != static_cast<size_t>(buckets)) {
    return absl::InvalidArgumentError(absl::StrCat("residuals for ", state.residuals.size(),
                                                   " buckets, but the plan has ", buckets));
  }
  for (int b = 0; b < buckets; ++b) {
    const size_t size = state.residuals[static_cast<size_t>(b)].size();
    if (size == 0) continue;
    if (plan.buckets[static_cast<size_t>(b)].period == 1) {
      return bad(b, "a residual, but the bucket has no update period");
    }
    if (static_cast<int64_t>(size) != PackedBytes(plan, b)) {
      return bad(b,
                 absl::StrCat("a residual of ", size, " bytes, expected ", PackedBytes(plan, b)));
    }
  }
  std::set<std::pair<int, int64_t>> seen;
  for (const State::Held& held : state.results) {
    if (held.bucket < 0 || held.bucket >= buckets) {
      return absl::InvalidArgumentError(
          absl::StrCat("a result for bucket ", held.bucket, ", but the plan has ", buckets));
    }
    const ExecBucket& b = plan.buckets[static_cast<size_t>(held.bucket)];
    // Pass m's result is delivered with submission m + delay: held only while that is to come.
    if (held.pass < 0 || held.pass >= state.passes || held.pass + b.delay < state.passes ||
        held.pass % b.period != b.phase) {
      return bad(held.bucket,
                 absl::StrCat("a result of pass ", held.pass, ", which is not held after ",
                              state.passes, " passes (delay ", b.delay, ", period ", b.period,
                              ", phase ", b.phase, ")"));
    }
    if (static_cast<int64_t>(held.values.size()) != PackedBytes(plan, held.bucket)) {
      return bad(held.bucket, absl::StrCat("a result of ", held.values.size(), " bytes, expected ",
                                           PackedBytes(plan, held.bucket)));
    }
    if (!seen.emplace(held.bucket, held.pass).second) {
      return bad(held.bucket, absl::StrCat("two results of pass ", held.pass));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PlanDelays::State> PlanDelays::Save() const {
  std::vector<std::string> busy;
  for (size_t e = 0; e < submitted_.size(); ++e) {
    if (submitted_[e] != submitted_.front() || !parked_[e].empty()) {
      busy.push_back(absl::StrCat("'", plan_->entries[e].response->name, "'"));
    }
  }
  if (!busy.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the delayed plan is in the middle of a step (", absl::StrJoin(busy, ", "),
        " submitted more often than the others, or waiting for a result); save between steps, "
        "after every handle of the step has completed"));
  }
  State state;
  state.passes = submitted_.empty() ? 0 : submitted_.front();
  state.residuals = residuals_;
  for (size_t b = 0; b < device_residuals_.size(); ++b) {
    if (device_residuals_[b] == nullptr) continue;
    absl::Status s = DeviceToHost(*device_residuals_[b], &state.residuals[b]);
    if (!s.ok()) return s;
  }
  for (size_t b = 0; b < results_.size(); ++b) {
    for (const auto& [pass, result] : results_[b]) {
      State::Held held{static_cast<int>(b), pass, {}};
      if (BucketOnDevice(static_cast<int>(b))) {
        absl::Status s = DeviceToHost(*result.buffer, &held.values);
        if (!s.ok()) return s;
      } else {
        const uint8_t* values = static_cast<const uint8_t*>(result.buffer->data());
        held.values.assign(values, values + result.buffer->size());
      }
      state.results.push_back(std::move(held));
    }
  }
  return state;
}

absl::Status PlanDelays::Restore(State state) {
  std::fill(submitted_.begin(), submitted_.end(), state.passes);
  residuals_ = std::move(state.residuals);
  for (size_t b = 0; b < residuals_.size(); ++b) {
    std::vector<uint8_t>& residual = residuals_[b];
    if (!residual.empty() && BucketOnDevice(static_cast<int>(b))) {
      device_residuals_[b] = HostToDevice(residual);
      if (!device_error_.ok()) return TakeDeviceError();
      Hold(static_cast<int64_t>(residual.size()), true);
      std::vector<uint8_t>().swap(residual);
      continue;
    }
    held_bytes_ += static_cast<int64_t>(residual.size());
  }
  for (State::Held& held : state.results) {
    if (BucketOnDevice(held.bucket)) {
      std::shared_ptr<DeviceMemory> values = HostToDevice(held.values);
      if (!device_error_.ok()) return TakeDeviceError();
      Store(held.bucket, held.pass, std::move(values));
      continue;
    }
    // Out of host memory ends the process here, as the std::vector it came in would have.
    std::shared_ptr<DeviceMemory> values = *CreateCpuBufferOps()->Allocate(held.values.size());
    if (!held.values.empty()) std::memcpy(values->data(), held.values.data(), held.values.size());
    Store(held.bucket, held.pass, std::move(values));
  }
  return absl::OkStatus();
}

bool PlanDelays::Due(int bucket, int64_t pass) const {
  const ExecBucket& b = plan_->buckets[static_cast<size_t>(bucket)];
  return pass % b.period == b.phase;
}

absl::StatusOr<PendingOp> PlanDelays::Accept(int entry, PendingOp& op) {
  PendingOp copy;
  copy.request = op.request;
  copy.enqueued = op.enqueued;
  const Tensor& input = op.inputs[0];
  const size_t bytes = static_cast<size_t>(input.ByteSize());
  Tensor tensor = input;
  if (EntryOnDevice(entry)) {
    if (device_ == nullptr) return NoDevice();
    // On the device, queued on device_'s stream after the producer's; the copy's tensor names
    // that stream, so that whoever reads it waits for the copy.
    std::shared_ptr<DeviceMemory> memory;
    for (const std::shared_ptr<DeviceMemory>& kept : device_copies_[static_cast<size_t>(entry)]) {
      if (kept.use_count() == 1 && kept->size() == bytes) memory = kept;
    }
    if (memory == nullptr) {
      absl::StatusOr<std::unique_ptr<DeviceMemory>> made = device_->Allocate(bytes);
      if (!made.ok()) return made.status();
      memory = std::shared_ptr<DeviceMemory>(std::move(*made));
      if (device_copies_[static_cast<size_t>(entry)].size() < MaxCopies(*plan_)) {
        device_copies_[static_cast<size_t>(entry)].push_back(memory);
      }
    }
    absl::Status s = device_->WaitForStream(input.stream);
    const CopySlice slice{memory->data(), input.data, input.NumElements()};
    if (s.ok()) s = device_->Copy({&slice, 1}, input.dtype, CopyScaling{});
    if (!s.ok()) return s;
    tensor.data = memory->data();
    tensor.stream = device_->stream();
    copy.owned_on_device = std::move(memory);
  } else {
    const auto* data = static_cast<const uint8_t*>(input.data);
    copy.owned = copies_.Take(entry, bytes);
    InPieces(
        copy.owned->data(), data, static_cast<int64_t>(bytes), 1,
        [](uint8_t* to, const uint8_t* from, int64_t n) {
          std::memcpy(to, from, static_cast<size_t>(n));
        },
        poke_);
    tensor.data = copy.owned->data();
  }
  const int64_t pass = submitted_[static_cast<size_t>(entry)]++;
  copy.plan_pass = pass;
  tensor.capacity_bytes = static_cast<int64_t>(bytes);
  copy.inputs.push_back(tensor);
  copy.outputs.push_back(tensor);
  Hold(static_cast<int64_t>(bytes), EntryOnDevice(entry));
  const bool matches_plan =
      op.request == plan_->entries[static_cast<size_t>(entry)].response->request;
  parked_[static_cast<size_t>(entry)].push_back(Parked{pass, std::move(op), matches_plan});
  return copy;
}

void PlanDelays::Retire(const PendingOp& copy) {
  if (copy.owned != nullptr) held_bytes_ -= static_cast<int64_t>(copy.owned->size());
  if (copy.owned_on_device != nullptr) {
    Hold(-static_cast<int64_t>(copy.owned_on_device->size()), true);
  }
}

absl::Status PlanDelays::Fold(int bucket, const std::vector<const PendingOp*>& inputs) {
  const ExecBucket& b = plan_->buckets[static_cast<size_t>(bucket)];
  const DataType dtype = DtypeOf(bucket);
  const size_t elem = DataTypeSize(dtype);
  if (BucketOnDevice(bucket)) {
    if (device_ == nullptr) return NoDevice();
    std::shared_ptr<DeviceMemory>& residual = device_residuals_[static_cast<size_t>(bucket)];
    if (residual == nullptr) {
      int64_t total = 0;
      for (const ExecSlice& s : b.slices) total += s.count;
      absl::StatusOr<std::unique_ptr<DeviceMemory>> made =
          device_->Allocate(static_cast<size_t>(total) * elem);
      if (!made.ok()) return made.status();
      residual = std::shared_ptr<DeviceMemory>(std::move(*made));
      absl::Status s = WriteZeros(*device_, residual->data(), total, dtype);
      if (!s.ok()) return s;
      Hold(static_cast<int64_t>(residual->size()), true);
    }
    for (size_t i = 0; i < b.slices.size(); ++i) {
      const PendingOp* op = inputs[i];
      if (op == nullptr) continue;
      const ExecSlice& s = b.slices[i];
      absl::Status done = device_->WaitForStream(op->inputs[0].stream);
      if (done.ok()) {
        done = device_->Accumulate(
            static_cast<uint8_t*>(residual->data()) +
                static_cast<size_t>(slice_offsets_[static_cast<size_t>(bucket)][i]) * elem,
            static_cast<const uint8_t*>(op->inputs[0].data) + static_cast<size_t>(s.offset) * elem,
            s.count, dtype, op->request.prescale);
      }
      if (!done.ok()) return done;
    }
    return absl::OkStatus();
  }
  std::vector<uint8_t>& residual = residuals_[static_cast<size_t>(bucket)];
  if (residual.empty()) {
    int64_t total = 0;
    for (const ExecSlice& s : b.slices) total += s.count;
    residual.assign(static_cast<size_t>(total) * elem, 0);
    held_bytes_ += static_cast<int64_t>(residual.size());
  }
  for (size_t i = 0; i < b.slices.size(); ++i) {
    const PendingOp* op = inputs[i];
    if (op == nullptr) continue;
    const ExecSlice& s = b.slices[i];
    InPieces(
        residual.data() +
            static_cast<size_t>(slice_offsets_[static_cast<size_t>(bucket)][i]) * elem,
        static_cast<const uint8_t*>(op->inputs[0].data) + static_cast<size_t>(s.offset) * elem,
        s.count, elem,
        [&](uint8_t* to, const uint8_t* from, int64_t n) {
          ScaledAdd(to, from, n, dtype, op->request.prescale);
        },
        poke_);
  }
  return absl::OkStatus();
}

absl::Status PlanDelays::DrainResidual(int bucket, uint8_t* packed, BufferOps& ops) {
  const DataType dtype = DtypeOf(bucket);
  const size_t elem = DataTypeSize(dtype);
  if (BucketOnDevice(bucket)) {
    const std::shared_ptr<DeviceMemory>& residual = device_residuals_[static_cast<size_t>(bucket)];
    if (residual == nullptr) return absl::OkStatus();
    if (device_ == nullptr) return NoDevice();
    const int64_t count = static_cast<int64_t>(residual->size() / elem);
    // After the folds queued on device_, and before the next ones.
    absl::Status s = ops.WaitForStream(device_->stream());
    if (s.ok()) s = ops.Accumulate(packed, residual->data(), count, dtype, 1.0);
    if (s.ok()) s = WriteZeros(ops, residual->data(), count, dtype);
    if (s.ok()) s = device_->WaitForStream(ops.stream());
    return s;
  }
  std::vector<uint8_t>& residual = residuals_[static_cast<size_t>(bucket)];
  if (residual.empty()) return absl::OkStatus();
  InPieces(
      packed, residual.data(), static_cast<int64_t>(residual.size() / elem), elem,
      [&](uint8_t* to, const uint8_t* from, int64_t n) { ScaledAdd(to, from, n, dtype, 1.0); },
      poke_);
  std::fill(residual.begin(), residual.end(), 0);
  return absl::OkStatus();
}

void PlanDelays::Store(int bucket, int64_t pass, std::shared_ptr<DeviceMemory> result) {
  Hold(static_cast<int64_t>(result->size()), BucketOnDevice(bucket));
  results_[static_cast<size_t>(bucket)][pass] =
      Result{std::move(result), members_[static_cast<size_t>(bucket)]};
}

std::vector<PendingOp> PlanDelays::TakeDeliverable() {
  std::vector<PendingOp> ready;
  for (size_t entry = 0; entry < parked_.size(); ++entry) {
    std::deque<Parked>& line = parked_[entry];
    const std::vector<int>& buckets = plan_->buckets_of[entry];
    while (!line.empty()) {
      // A submission that differs from the plan's agreed operation (a new model's tensor under an
      // old name, with another shape) diverges when its copy reaches its first bucket, and the
      // plan is dropped then; until then it stays parked, since results sized for the plan's
      // tensor must never be written into its buffers.
      if (!line.front().matches_plan) break;
      const int64_t pass = line.front().pass;
      // Every bucket's due result must be in before any is written.
      bool complete = true;
      for (int b : buckets) {
        const ExecBucket& bucket = plan_->buckets[static_cast<size_t>(b)];
        const int64_t from = pass - bucket.delay;
        if (from < 0 || !Due(b, from)) continue;
        if (results_[static_cast<size_t>(b)].count(from) == 0) complete = false;
      }
      if (!complete) break;
      PendingOp op = std::move(line.front().op);
      line.pop_front();
      const Request& request = op.request;
      const DataType dtype = request.tensors[0].dtype;
      const size_t elem = DataTypeSize(dtype);
      auto* out = static_cast<uint8_t*>(op.outputs[0].data);
      // The plan covers every element once, so when each of the tensor's buckets brings an
      // update this pass the results write all of it; otherwise the rest reads zeros.
      const bool all_due = std::all_of(buckets.begin(), buckets.end(), [&](int b) {
        const int64_t from = pass - plan_->buckets[static_cast<size_t>(b)].delay;
        return from >= 0 && Due(b, from);
      });
      const bool on_device = EntryOnDevice(static_cast<int>(entry)) && device_ != nullptr;
      auto queued = [&](const absl::Status& s) {
        if (!s.ok() && device_error_.ok()) device_error_ = s;
      };
      if (!all_due) {
        if (on_device) {
          queued(WriteZeros(*device_, out, op.outputs[0].NumElements(), dtype));
        } else {
          std::memset(out, 0, static_cast<size_t>(op.outputs[0].ByteSize()));
        }
      }
      bool any = false;
      for (int b : buckets) {
        const ExecBucket& bucket = plan_->buckets[static_cast<size_t>(b)];
        const int64_t from = pass - bucket.delay;
        if (from < 0 || !Due(b, from)) continue;
        auto found = results_[static_cast<size_t>(b)].find(from);
        Result& result = found->second;
        for (size_t i = 0; i < bucket.slices.size(); ++i) {
          const ExecSlice& s = bucket.slices[i];
          if (s.entry != static_cast<int>(entry)) continue;
          if (on_device) {
            const CopySlice slice{
                out + static_cast<size_t>(s.offset) * elem,
                static_cast<const uint8_t*>(result.buffer->data()) +
                    static_cast<size_t>(slice_offsets_[static_cast<size_t>(b)][i]) * elem,
                s.count};
            queued(device_->Copy({&slice, 1}, dtype,
                                 FinishScaling(dtype, request.op, request.postscale, size_)));
            continue;
          }
          InPieces(
              out + static_cast<size_t>(s.offset) * elem,
              static_cast<const uint8_t*>(result.buffer->data()) +
                  static_cast<size_t>(slice_offsets_[static_cast<size_t>(b)][i]) * elem,
              s.count, elem,
              [&](uint8_t* to, const uint8_t* from, int64_t n) {
                FinishReduced(to, from, n, dtype, request.op, request.postscale, size_);
              },
              poke_);
        }
        any = true;
        result.waiting.erase(
            std::find(result.waiting.begin(), result.waiting.end(), static_cast<int>(entry)));
        if (on_device) reads_.push_back(result.buffer);  // held until the copies are fenced
        if (result.waiting.empty()) {
          Hold(-static_cast<int64_t>(result.buffer->size()), on_device);
          results_[static_cast<size_t>(b)].erase(found);
        }
      }
      op.handle->set_has_update(any);
      ready.push_back(std::move(op));
    }
  }
  return ready;
}

std::optional<PendingOp> PlanDelays::TakeParked(int entry, int64_t pass) {
  std::deque<Parked>& line = parked_[static_cast<size_t>(entry)];
  for (auto it = line.begin(); it != line.end(); ++it) {
    if (it->pass != pass) continue;
    PendingOp op = std::move(it->op);
    line.erase(it);
    return op;
  }
  return std::nullopt;
}

std::vector<PendingOp> PlanDelays::TakeAllParked() {
  std::vector<PendingOp> all;
  for (std::deque<Parked>& line : parked_) {
    for (Parked& p : line) all.push_back(std::move(p.op));
    line.clear();
  }
  for (auto& residual : residuals_) std::vector<uint8_t>().swap(residual);
  for (auto& residual : device_residuals_) residual.reset();
  for (auto& results : results_) results.clear();
  held_bytes_ = 0;
  held_device_bytes_ = 0;
  return all;
}

size_t PlanDelays::parked() const {
  size_t n = 0;
  for (const std::deque<Parked>& line : parked_) n += line.size();
  return n;
}

std::vector<std::string> PlanDelays::Describe() const {
  std::vector<int> results(plan_->entries.size(), 0);
  std::vector<bool> residual(plan_->entries.size(), false);
  for (size_t b = 0; b < plan_->buckets.size(); ++b) {
    for (const auto& [pass, result] : results_[b]) {
      for (int e : result.waiting) ++results[static_cast<size_t>(e)];
    }
    // A device residual is not read back to look: once allocated it counts as held.
    const bool held =
        device_residuals_[b] != nullptr || std::any_of(residuals_[b].begin(), residuals_[b].end(),
                                                       [](uint8_t byte) { return byte != 0; });
    if (!held) continue;
    for (int e : members_[b]) residual[static_cast<size_t>(e)] = true;
  }
  std::vector<std::string> out;
  for (size_t e = 0; e < plan_->entries.size(); ++e) {
    if (results[e] == 0 && !residual[e]) continue;
    std::string text = absl::StrCat("'", plan_->entries[e].response->name, "' (");
    if (results[e] > 0)
      absl::StrAppend(&text, results[e], results[e] == 1 ? " result" : " results");
    if (residual[e]) absl::StrAppend(&text, results[e] > 0 ? ", " : "", "a residual");
    out.push_back(absl::StrCat(text, ")"));
  }
  return out;
}

}  // namespace overlap
