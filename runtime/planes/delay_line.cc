// Delayed updates and update periods (delay_line.h states the contract).
#include "runtime/planes/delay_line.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/scaling.h"
#include "runtime/api/handle_state.h"
#include "runtime/negotiation/messages.h"

namespace overlap {

struct DelayLine::Result {
  int64_t step = 0;
  std::vector<uint8_t> buffer;  // the reduction's input, then its result
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  // The handle that receives the result, once its submission came.
  std::shared_ptr<internal::HandleState> waiting ABSL_GUARDED_BY(mu);
  Tensor output ABSL_GUARDED_BY(mu);
};

namespace {

void Add(DataType dtype, uint8_t* to, const uint8_t* from, size_t bytes) {
  ScaledAdd(to, from, static_cast<int64_t>(bytes / DataTypeSize(dtype)), dtype, 1.0);
}

std::string Schedule(int delay, int period, int phase) {
  return absl::StrCat("delay ", delay, ", period ", period, ", phase ", phase);
}

// Copies a finished result into the waiting output and completes its handle.
void Deliver(const std::vector<uint8_t>& buffer, const absl::Status& status,
             const std::shared_ptr<internal::HandleState>& handle, const Tensor& output) {
  if (status.ok()) std::memcpy(output.data, buffer.data(), buffer.size());
  handle->Complete(status);
}

}  // namespace

DelayLine::~DelayLine() = default;

absl::Status DelayLine::Check(const std::string& name, const Tensor& input, const Tensor& output,
                              const AllreduceOptions& o, const Line* line) const {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, ": allreduce '", name, "' with a delayed update: ", why));
  };
  if (o.delay < 0 || o.delay > kMaxUpdateDelay) {
    return bad(absl::StrCat("delay ", o.delay, " is not in 0..", kMaxUpdateDelay));
  }
  if (o.period < 1 || o.period > kMaxUpdatePeriod) {
    return bad(absl::StrCat("period ", o.period, " is not in 1..", kMaxUpdatePeriod));
  }
  if (o.phase < 0 || o.phase >= o.period) {
    return bad(absl::StrCat("phase ", o.phase, " is not in 0..", o.period - 1));
  }
  if (!DelayableDtype(input.dtype)) {
    return bad(absl::StrCat("dtype ", DataTypeName(input.dtype),
                            " (delays and periods need float32 or float64 gradients)"));
  }
  if (input.device.is_cuda() || output.device.is_cuda()) {
    return bad("CUDA tensors cannot have delayed updates yet");
  }
  if (!DelayableOp(o.op)) {
    return bad(absl::StrCat("op ", ReduceOpName(o.op), " (needs sum or average)"));
  }
  if (output.dtype != input.dtype || output.shape != input.shape) {
    return bad("output differs from input in dtype or shape");
  }
  if (input.data == nullptr || output.data == nullptr) return bad("null data pointer");
  if (input.capacity_bytes < input.ByteSize() || output.capacity_bytes < output.ByteSize()) {
    return bad(absl::StrCat("buffer of ", std::min(input.capacity_bytes, output.capacity_bytes),
                            " bytes is smaller than the shape's ", input.ByteSize()));
  }
  if (line != nullptr) {
    if (line->dtype != input.dtype || line->shape != input.shape) {
      return bad(absl::StrCat("dtype or shape changed since its first submission (",
                              DataTypeName(line->dtype), " [", absl::StrJoin(line->shape, ","),
                              "])"));
    }
    if (line->delay != o.delay || line->period != o.period || line->phase != o.phase) {
      return bad(absl::StrCat("schedule changed from ",
                              Schedule(line->delay, line->period, line->phase), " to ",
                              Schedule(o.delay, o.period, o.phase)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Handle> DelayLine::Submit(const std::string& name, const Tensor& input,
                                         const Tensor& output, const AllreduceOptions& options) {
  absl::MutexLock lock(&mu_);
  auto found = lines_.find(name);
  absl::Status valid =
      Check(name, input, output, options, found == lines_.end() ? nullptr : &found->second);
  if (!valid.ok()) return valid;
  if (found == lines_.end()) {
    Line line;
    line.dtype = input.dtype;
    line.shape = input.shape;
    line.delay = options.delay;
    line.period = options.period;
    line.phase = options.phase;
    found = lines_.emplace(name, std::move(line)).first;
  }
  Line& line = found->second;
  const size_t bytes = static_cast<size_t>(input.ByteSize());
  const int64_t n = line.submitted;
  const auto* in = static_cast<const uint8_t*>(input.data);

  // Consume this submission's input: reduce it (with what earlier steps left) or keep it.
  std::shared_ptr<Result> fresh;
  if (n % line.period == line.phase) {
    fresh = std::make_shared<Result>();
    fresh->step = n;
    fresh->buffer.assign(in, in + bytes);
    if (!line.residual.empty()) {
      Add(line.dtype, fresh->buffer.data(), line.residual.data(), bytes);
      std::memset(line.residual.data(), 0, bytes);
    }
    const int64_t slot = (n / line.period) % (line.delay / line.period + 2);
    AllreduceOptions reduce = options;
    reduce.delay = 0;
    reduce.period = 1;
    reduce.phase = 0;
    std::shared_ptr<Result> r = fresh;
    reduce.on_done = [r](const absl::Status& status) {
      std::shared_ptr<internal::HandleState> waiting;
      Tensor output;
      {
        absl::MutexLock result_lock(&r->mu);
        r->done = true;
        r->status = status;
        waiting = std::move(r->waiting);
        output = r->output;
      }
      if (waiting != nullptr) Deliver(r->buffer, status, waiting, output);
    };
    Tensor data = input;
    data.data = fresh->buffer.data();
    data.capacity_bytes = bytes;
    absl::StatusOr<Handle> reduction = submit_(absl::StrCat(name, "~", slot), data, reduce,
                                               Schedule(line.delay, line.period, line.phase));
    if (!reduction.ok()) return reduction.status();
  } else {
    if (line.residual.empty()) line.residual.assign(bytes, 0);
    Add(line.dtype, line.residual.data(), in, bytes);
  }
  ++line.submitted;
  if (fresh != nullptr) line.in_flight.push_back(fresh);

  // Deliver the result due now, if any: that of submission n - d.
  std::shared_ptr<Result> due;
  if (!line.in_flight.empty() && line.in_flight.front()->step == n - line.delay) {
    due = line.in_flight.front();
    line.in_flight.pop_front();
  }
  auto handle = std::make_shared<internal::HandleState>(name, rank_, options.on_done,
                                                        /*observations=*/nullptr, wait_bound_);
  if (due == nullptr) {
    std::memset(output.data, 0, bytes);
    handle->set_has_update(false);
    handle->Complete(absl::OkStatus());
    return Handle(handle);
  }
  absl::Status status;
  {
    absl::MutexLock result_lock(&due->mu);
    if (!due->done) {
      due->waiting = handle;
      due->output = output;
      return Handle(handle);
    }
    status = due->status;
  }
  Deliver(due->buffer, status, handle, output);
  return Handle(handle);
}

absl::StatusOr<std::string> DelayLine::Save(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  ByteWriter out;
  out.PutString("overlap-delayed-v1");
  out.PutI64(static_cast<int64_t>(lines_.size()));
  for (const auto& [name, line] : lines_) {
    out.PutString(name);
    out.PutI32(static_cast<int32_t>(line.dtype));
    out.PutI64s(line.shape);
    out.PutI64s({line.delay, line.period, line.phase, line.submitted});
    out.PutString(std::string(line.residual.begin(), line.residual.end()));
    out.PutI64(static_cast<int64_t>(line.in_flight.size()));
    for (const std::shared_ptr<Result>& r : line.in_flight) {
      absl::MutexLock result_lock(&r->mu);
      auto done = [&r]() ABSL_SHARED_LOCKS_REQUIRED(r->mu) { return r->done; };
      if (!r->mu.AwaitWithTimeout(absl::Condition(&done), timeout)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "rank ", rank_, ": SaveCompressionState: the delayed reduction of '", name,
            "' (submission ", r->step, ") did not finish within ", absl::FormatDuration(timeout)));
      }
      if (!r->status.ok()) return r->status;
      out.PutI64(r->step);
      out.PutString(std::string(r->buffer.begin(), r->buffer.end()));
    }
  }
  return std::move(out.bytes());
}

absl::Status DelayLine::Restore(const std::string& snapshot) {
  ByteReader in(snapshot);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, ": RestoreCompressionState: delayed updates: ", why));
  };
  std::string magic;
  int64_t count = 0;
  if (!in.GetString(&magic).ok() || magic != "overlap-delayed-v1" || !in.GetI64(&count).ok() ||
      count < 0) {
    return bad("not a snapshot of delayed updates");
  }
  std::map<std::string, Line> restored;
  for (int64_t i = 0; i < count; ++i) {
    std::string name, residual;
    int32_t dtype = 0;
    std::vector<int64_t> numbers;
    Line line;
    int64_t results = 0;
    absl::Status s = in.GetString(&name);
    if (s.ok()) s = in.GetI32(&dtype);
    if (s.ok()) s = in.GetI64s(&line.shape);
    if (s.ok()) s = in.GetI64s(&numbers);
    if (s.ok()) s = in.GetString(&residual);
    if (s.ok()) s = in.GetI64(&results);
    if (!s.ok()) return bad(s.message());
    if (dtype != static_cast<int32_t>(DataType::kFloat32) &&
        dtype != static_cast<int32_t>(DataType::kFloat64)) {
      return bad(absl::StrCat("tensor '", name, "' has dtype code ", dtype));
    }
    line.dtype = static_cast<DataType>(dtype);
    int64_t elements = 1;
    for (int64_t d : line.shape) {
      if (d < 0 || d > (int64_t{1} << 40)) return bad(absl::StrCat("tensor '", name, "' shape"));
      elements *= d;
      if (elements > (int64_t{1} << 40)) return bad(absl::StrCat("tensor '", name, "' shape"));
    }
    const size_t bytes = static_cast<size_t>(elements) * DataTypeSize(line.dtype);
    if (numbers.size() != 4 || numbers[0] < 0 || numbers[0] > kMaxUpdateDelay || numbers[1] < 1 ||
        numbers[1] > kMaxUpdatePeriod || numbers[2] < 0 || numbers[2] >= numbers[1] ||
        numbers[3] < 0) {
      return bad(absl::StrCat("tensor '", name, "' schedule"));
    }
    line.delay = static_cast<int>(numbers[0]);
    line.period = static_cast<int>(numbers[1]);
    line.phase = static_cast<int>(numbers[2]);
    line.submitted = numbers[3];
    if (!residual.empty() && residual.size() != bytes) {
      return bad(absl::StrCat("tensor '", name, "' residual of ", residual.size(), " bytes"));
    }
    line.residual.assign(residual.begin(), residual.end());
    if (results < 0 || results > kMaxUpdateDelay + 1) {
      return bad(absl::StrCat("tensor '", name, "' has ", results, " results"));
    }
    for (int64_t k = 0; k < results; ++k) {
      auto r = std::make_shared<Result>();
      std::string buffer;
      s = in.GetI64(&r->step);
      if (s.ok()) s = in.GetString(&buffer);
      if (!s.ok()) return bad(s.message());
      if (buffer.size() != bytes || r->step < 0 || r->step >= line.submitted) {
        return bad(absl::StrCat("tensor '", name, "' result ", k));
      }
      r->buffer.assign(buffer.begin(), buffer.end());
      absl::MutexLock result_lock(&r->mu);
      r->done = true;
      line.in_flight.push_back(std::move(r));
    }
    restored.emplace(name, std::move(line));
  }
  absl::MutexLock lock(&mu_);
  lines_ = std::move(restored);
  return absl::OkStatus();
}

int64_t DelayLine::held_bytes() const {
  absl::MutexLock lock(&mu_);
  int64_t total = 0;
  for (const auto& [name, line] : lines_) {
    total += static_cast<int64_t>(line.residual.size());
    for (const auto& r : line.in_flight) total += static_cast<int64_t>(r->buffer.size());
  }
  return total;
}

std::vector<DelayLine::Pending> DelayLine::Describe() const {
  absl::MutexLock lock(&mu_);
  std::vector<Pending> out;
  for (const auto& [name, line] : lines_) {
    Pending p{name, static_cast<int>(line.in_flight.size()), false};
    for (uint8_t b : line.residual) p.residual |= b != 0;
    if (p.results > 0 || p.residual) out.push_back(p);
  }
  return out;
}

}  // namespace overlap
