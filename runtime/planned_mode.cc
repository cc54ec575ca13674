#include "runtime/planned_mode.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "collectives/scaling.h"
#include "runtime/device_backend.h"
#include "runtime/rank_bits.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

// How long a started unit waits before asking which ranks have started it: soon enough to warn on
// time, and to notice an unreachable peer through a round that times out.
absl::Duration ProbeInterval(const Config& config) {
  return absl::Seconds(std::min(config.stall_warning_s, config.collective_timeout_s / 4));
}

// A planned unit may wait for ranks that are still computing for as long as a negotiated
// operation may, so its collective's own timeout starts after the stall timeout.
Config PlaneConfig(Config config) {
  config.collective_timeout_s += config.stall_timeout_s;
  return config;
}

// A check starts with a fingerprint of its unit and the fingerprint's complement. The OR over the
// ranks returns them unchanged where every rank started the same unit; any difference sets some
// bit in both. The diverged and joined bits follow.
constexpr size_t kFingerprintWords = 2;
constexpr size_t kFingerprintBits = kFingerprintWords * 64;

// FNV-1a over the bucket's number, kind and its started slices (tensor name, offset, count): the
// same on every rank, as absl::Hash (seeded per process) is not.
class Fingerprint {
 public:
  void Add(absl::string_view bytes) {
    for (char c : bytes) Mix(static_cast<uint8_t>(c));
    Add(int64_t{-1});  // ends the string: ("ab", "c") differs from ("a", "bc")
  }
  void Add(int64_t value) {
    for (int i = 0; i < 8; ++i) Mix(static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * i)));
  }
  uint64_t value() const { return hash_; }

 private:
  void Mix(uint8_t byte) {
    hash_ ^= byte;
    hash_ *= 0x100000001b3ULL;
  }
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace

PlannedMode::PlannedMode(std::unique_ptr<Executor> executor,
                         std::unique_ptr<ControlCollectives> checks, const Config& config,
                         std::vector<std::string> hosts, Timeline* timeline,
                         CompressionStage* compression, DataPlane::CompleteFn complete,
                         const CudaPlaneFactory& make_cuda_plane)
    : config_(config),
      rank_(checks->rank()),
      size_(checks->size()),
      hosts_(std::move(hosts)),
      timeline_(timeline),
      complete_(std::move(complete)),
      executor_(std::move(executor)),
      checks_(std::move(checks)),
      plane_(
          executor_.get(), PlaneConfig(config), rank_, size_, timeline, compression,
          [this](PendingOp& op, const absl::Status& status) { OnDataDone(op, status); },
          "planned "),
      host_runner_(*BucketRunner::Create(
          executor_.get(), Device::Cpu(), rank_, size_, timeline,
          absl::Seconds(config.collective_timeout_s + config.stall_timeout_s))),
      poke_([this] { executor_->Poke(); }) {
  if (make_cuda_plane != nullptr) {
    cuda_plane_ = make_cuda_plane(
        PlaneConfig(config),
        [this](PendingOp& op, const absl::Status& status) { OnDataDone(op, status); });
  }
}

void PlannedMode::Freeze(ExecutablePlan plan, const absl::flat_hash_set<int32_t>& already_agreed,
                         absl::Duration step_time) {
  plan.Index();
  plan_ = std::make_shared<const ExecutablePlan>(std::move(plan));
  entry_of_.clear();
  planned_ids_.clear();
  for (int i = 0; i < static_cast<int>(plan_->entries.size()); ++i) {
    entry_of_[plan_->entries[static_cast<size_t>(i)].response->name] = i;
    // A plan restored from a checkpoint names tensors negotiation has not cached (-1).
    const int32_t id = plan_->entries[static_cast<size_t>(i)].cache_id;
    if (id >= 0) planned_ids_.insert(id);
  }
  const bool holds_cuda = std::any_of(
      plan_->entries.begin(), plan_->entries.end(),
      [](const PlanEntry& e) { return e.response->request.device == DeviceKind::kCuda; });
  // A setup error fails the plan's CUDA tensors when their buckets start, on every rank.
  if (holds_cuda && cuda_plane_ != nullptr) {
    (void)cuda_plane_->SetUpOnce();
    MakeDeviceRunner();
  }
  if (holds_cuda && plan_->delayed() && delay_ops_ == nullptr && device_runner_ != nullptr) {
    // The delay line's CUDA copies, residuals and deliveries: a stream of their own.
    absl::StatusOr<std::unique_ptr<BufferOps>> ops =
        Devices().CreateBufferOps(cuda_plane_->device(), nullptr);
    if (ops.ok()) delay_ops_ = *std::move(ops);
  }
  skip_.clear();
  for (int32_t id : already_agreed) {
    if (planned_ids_.contains(id)) skip_.insert(id);
  }
  next_bucket_ = 0;
  pass_ = 0;
  backlog_.clear();
  delays_.reset();
  if (plan_->delayed()) {
    delays_ = std::make_unique<PlanDelays>(plan_, size_, poke_, delay_ops_.get());
  }
  host_runner_->Reset();  // its buffers were sized for the old plan's buckets
  if (device_runner_ != nullptr) device_runner_->Reset();
  UpdateHeldBytes();
  frozen_ = true;
  must_unfreeze_ = false;
  patience_ = std::max(absl::Seconds(1), 4 * step_time);
  blocked_since_ = absl::InfiniteFuture();
  blocked_warned_ = false;
  wants_unfreeze_ = false;
  spdlog::info("overlap: rank {}: planned execution ({}) of {} tensors in {} buckets", rank_,
               plan_->source, plan_->entries.size(), plan_->buckets.size());
}

absl::StatusOr<std::optional<PlanDelays::State>> PlannedMode::SaveState() const {
  if (!frozen_) return absl::FailedPreconditionError("no plan is in force");
  if (!launches_.empty()) return std::nullopt;  // its buckets are still running
  std::vector<std::string> submitted;
  for (const auto& [entry, op] : waiting_) submitted.push_back(QuotedName(entry));
  for (const auto& [entry, active] : active_) submitted.push_back(QuotedName(entry));
  if (!submitted.empty() || next_bucket_ != 0) {
    std::sort(submitted.begin(), submitted.end());
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan is in the middle of a step (bucket ", next_bucket_, " of ", plan_->buckets.size(),
        " is next",
        submitted.empty()
            ? ""
            : absl::StrCat("; ", absl::StrJoin(submitted, ", "), " submitted and waiting for it"),
        "); save between steps, once every handle of the step has completed"));
  }
  if (delays_ == nullptr) {
    PlanDelays::State state;
    state.passes = pass_;
    state.residuals.resize(plan_->buckets.size());
    return std::optional<PlanDelays::State>(std::move(state));
  }
  // Copies still in line, or results in that Progress has not delivered yet: all will be soon.
  if (!delayed_drained() || delays_->parked() > 0 || !delivering_.empty()) return std::nullopt;
  absl::StatusOr<PlanDelays::State> state = delays_->Save();
  if (!state.ok()) return state.status();
  return std::optional<PlanDelays::State>(*std::move(state));
}

void PlannedMode::Resume(ExecutablePlan plan, PlanDelays::State state, absl::Duration step_time) {
  Freeze(std::move(plan), {}, step_time);
  pass_ = state.passes;
  if (delays_ != nullptr) {
    absl::Status restored = delays_->Restore(std::move(state));
    if (!restored.ok()) {
      // A checkpoint that cannot be put back would not repeat the saved run: the job stops.
      stalled_ =
          absl::Status(restored.code(),
                       absl::StrCat("rank ", rank_,
                                    ": restoring the delayed plan's state: ", restored.message()));
    }
  }
  UpdateHeldBytes();
}

std::vector<PendingOp> PlannedMode::Unfreeze() {
  std::vector<PendingOp> unstarted;
  // A delayed plan's copies are the runtime's own: the parked originals go back instead.
  for (auto& [entry, op] : waiting_) {
    if (op.plan_pass < 0) unstarted.push_back(std::move(op));
  }
  waiting_.clear();
  backlog_.clear();
  // A tensor with buckets still to start goes back whole; its input was never overwritten.
  std::vector<int> partial;
  for (auto& [entry, active] : active_) {
    const size_t buckets = plan_->buckets_of[static_cast<size_t>(entry)].size();
    if (active.launched < buckets) partial.push_back(entry);
  }
  for (int entry : partial) {
    if (active_[entry].op.plan_pass < 0) unstarted.push_back(std::move(active_[entry].op));
    active_.erase(entry);
  }
  if (delays_ != nullptr) {
    const std::vector<std::string> held = delays_->Describe();
    if (!held.empty()) {
      spdlog::warn(
          "overlap: rank {}: leaving the delayed plan discards the delayed updates of {}; steps "
          "still waiting for theirs are reduced again synchronously",
          rank_, absl::StrJoin(held, ", "));
    }
    for (PendingOp& op : delays_->TakeAllParked()) unstarted.push_back(std::move(op));
    delays_.reset();
    UpdateHeldBytes();
  }
  frozen_ = false;
  must_unfreeze_ = false;
  entry_of_.clear();
  planned_ids_.clear();
  skip_.clear();
  wants_unfreeze_ = false;
  blocked_since_ = absl::InfiniteFuture();
  if (join_ == JoinState::kAllJoined) join_ = JoinState::kNone;
  return unstarted;
}

void PlannedMode::Add(PendingOp op) {
  const int entry = entry_of_.at(op.request.name);
  if (delays_ == nullptr) {
    waiting_.emplace(entry, std::move(op));
    return;
  }
  absl::StatusOr<PendingOp> copy = delays_->Accept(entry, op);
  if (!copy.ok()) {
    complete_(op, absl::Status(copy.status().code(),
                               absl::StrCat("rank ", rank_, ": planned allreduce '",
                                            op.request.name, "': ", copy.status().message())));
    return;
  }
  backlog_[entry].push_back(*std::move(copy));
  Feed(entry);
  deliver_due_ = true;  // results of earlier passes may be due now; completed in Progress
}

void PlannedMode::Feed(int entry) {
  auto line = backlog_.find(entry);
  if (line == backlog_.end() || line->second.empty()) return;
  if (waiting_.contains(entry) || active_.contains(entry)) return;
  waiting_.emplace(entry, std::move(line->second.front()));
  line->second.pop_front();
}

void PlannedMode::Deliver() {
  deliver_due_ = false;
  if (delays_ == nullptr) return;
  Delivering device;
  for (PendingOp& op : delays_->TakeDeliverable()) {
    if (op.request.device == DeviceKind::kCuda) {
      device.ops.push_back(std::move(op));
    } else {
      complete_(op, absl::OkStatus());
    }
  }
  absl::Status queued = delays_->TakeDeviceError();
  if (!device.ops.empty() && queued.ok()) {
    // CUDA results were copied out on the delay line's stream: complete once that is done.
    device.reads = delays_->TakeReads();
    absl::StatusOr<std::unique_ptr<Work>> fence = delay_ops_->Fence();
    if (fence.ok()) {
      device.fence = *std::move(fence);
      delivering_.push_back(std::move(device));
      UpdateHeldBytes();
      return;
    }
    queued = fence.status();
  }
  if (!queued.ok()) {
    stalled_ = absl::Status(
        queued.code(),
        absl::StrCat("rank ", rank_, ": delivering delayed CUDA results: ", queued.message()));
    for (PendingOp& op : device.ops) complete_(op, stalled_);
  }
  UpdateHeldBytes();
}

absl::Status PlannedMode::ProgressDelivering() {
  while (!delivering_.empty()) {
    absl::StatusOr<bool> done = delivering_.front().fence->Test();
    if (done.ok() && !*done) return absl::OkStatus();
    Delivering d = std::move(delivering_.front());
    delivering_.pop_front();
    absl::Status status =
        done.ok() ? absl::OkStatus()
                  : absl::Status(done.status().code(),
                                 absl::StrCat("rank ", rank_, ": delivering delayed CUDA results: ",
                                              done.status().message()));
    for (PendingOp& op : d.ops) complete_(op, status);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

void PlannedMode::UpdateHeldBytes() {
  delayed_bytes_.store(delays_ != nullptr ? delays_->held_bytes() : 0, std::memory_order_relaxed);
  delayed_device_bytes_.store(delays_ != nullptr ? delays_->held_device_bytes() : 0,
                              std::memory_order_relaxed);
  device_buffer_bytes_.store(device_runner_ != nullptr ? device_runner_->held_bytes() : 0,
                             std::memory_order_relaxed);
  buffer_bytes_.store(
      host_runner_->held_bytes() + (delays_ != nullptr ? delays_->pooled_bytes() : 0),
      std::memory_order_relaxed);
}

void PlannedMode::SetJoined(bool joined) {
  if (joined && join_ == JoinState::kNone) join_ = JoinState::kJoined;
}

std::optional<PendingOp> PlannedMode::JoinAgreed(PendingOp join) {
  if (!frozen_ || join_ == JoinState::kAllJoined) {
    join_ = JoinState::kNone;
    return join;
  }
  join_ = JoinState::kJoined;
  held_join_ = std::move(join);
  return std::nullopt;
}

bool PlannedMode::CanLaunch() const {
  if (!frozen_ || must_unfreeze_ || join_ == JoinState::kAllJoined || plan_->buckets.empty()) {
    return false;
  }
  for (const Launch& l : launches_) {
    if (!l.checked) return false;  // bucket k+1 waits for bucket k's check
  }
  if (join_ == JoinState::kJoined) return true;
  const ExecBucket& bucket = plan_->buckets[static_cast<size_t>(next_bucket_)];
  for (const ExecSlice& slice : bucket.slices) {
    if (skip_.contains(plan_->entries[static_cast<size_t>(slice.entry)].cache_id)) continue;
    // Its first bucket of the pass takes a new submission; later ones continue what it started
    // (an entry still active from the previous pass must not be mistaken for this pass's).
    if (FirstBucketOf(slice.entry) ? !waiting_.contains(slice.entry)
                                   : !active_.contains(slice.entry)) {
      return false;
    }
  }
  return true;
}

bool PlannedMode::HasUnlaunched() const {
  if (!waiting_.empty()) return true;
  // A tensor whose buckets have all started is only waiting for its data (a long all-gather),
  // not for the program: that is no reason to give up the plan.
  for (const auto& [entry, active] : active_) {
    if (active.launched < plan_->buckets_of[static_cast<size_t>(entry)].size()) return true;
  }
  return false;
}

bool PlannedMode::FirstBucketOf(int entry) const {
  return plan_->buckets_of[static_cast<size_t>(entry)].front() == next_bucket_;
}

void PlannedMode::Advance() {
  ++next_bucket_;
  if (next_bucket_ == static_cast<int>(plan_->buckets.size())) {
    next_bucket_ = 0;
    ++pass_;
    skip_.clear();  // the first pass is over
  }
}

absl::Status PlannedMode::LaunchNext() {
  const ExecBucket& bucket = plan_->buckets[static_cast<size_t>(next_bucket_)];
  Launch launch;
  launch.bucket = next_bucket_;
  launch.pass = pass_;
  launch.plan = plan_;
  launch.started = absl::Now();
  Fingerprint fingerprint;
  fingerprint.Add(int64_t{next_bucket_});
  fingerprint.Add(static_cast<int64_t>(bucket.kind));
  for (const ExecSlice& slice : bucket.slices) {
    const int entry = slice.entry;
    const PlanEntry& e = plan_->entries[static_cast<size_t>(entry)];
    if (skip_.contains(e.cache_id)) continue;
    fingerprint.Add(e.response->name);
    fingerprint.Add(slice.offset);
    fingerprint.Add(slice.count);
    if (std::find(launch.members.begin(), launch.members.end(), entry) != launch.members.end()) {
      continue;
    }
    launch.members.push_back(entry);
    launch.responses.push_back(e.response);
  }
  const size_t n = launch.members.size();
  launch.check.assign(kFingerprintWords + Words(n) + Words(static_cast<size_t>(size_)), 0);
  launch.check[0] = fingerprint.value();
  launch.check[1] = ~fingerprint.value();
  std::vector<ReadyOp> ready;
  for (size_t i = 0; i < n; ++i) {
    const int entry = launch.members[i];
    const PlanEntry& e = plan_->entries[static_cast<size_t>(entry)];
    auto it = waiting_.find(entry);
    if (bucket.kind != BucketKind::kWhole) {
      // Sliced: the tensor becomes active at its first bucket of the pass.
      if (it != waiting_.end() && FirstBucketOf(entry)) {
        ActiveEntry active;
        active.op = std::move(it->second);
        waiting_.erase(it);
        if (timeline_->enabled())
          timeline_->Span(e.response->name, "PLAN_WAIT", active.op.enqueued, launch.started);
        active.diverged_here = !(active.op.request == e.response->request);
        active_.emplace(entry, std::move(active));
      }
      auto a = active_.find(entry);
      if (a != active_.end()) {
        ++a->second.launched;
        if (a->second.diverged_here) SetBit(&launch.check, kFingerprintBits + i);
      }
      continue;
    }
    if (it == waiting_.end()) {  // joined: zeros
      ready.push_back(ReadyOp{e.response, std::nullopt});
      continue;
    }
    PendingOp op = std::move(it->second);
    waiting_.erase(it);
    if (timeline_->enabled())
      timeline_->Span(e.response->name, "PLAN_WAIT", op.enqueued, launch.started);
    if (op.request == e.response->request) {
      launch.expected.insert(e.response->name);
      ready.push_back(ReadyOp{e.response, std::move(op)});
    } else {
      SetBit(&launch.check, kFingerprintBits + i);
      launch.diverged_here.push_back(std::move(op));
      ready.push_back(ReadyOp{e.response, std::nullopt});
    }
  }
  if (join_ == JoinState::kJoined) {
    SetBit(&launch.check, kFingerprintBits + Words(n) * 64 + static_cast<size_t>(rank_));
  }
  Advance();
  ++launch_count_;
  launch.number = launch_count_;
  launch.next_probe = launch.started + ProbeInterval(config_);
  blocked_since_ = absl::InfiniteFuture();
  blocked_warned_ = false;
  launches_.push_back(std::move(launch));
  Launch& l = launches_.back();
  if (n == 0) {  // the whole unit was agreed by negotiation before the freeze
    l.checked = true;
    l.diverged.assign(0, false);
    return absl::OkStatus();
  }
  // The check first: its few bytes then travel ahead of the bucket's data on the connections
  // they share, so it completes (and the next bucket may launch and pack while this one's data
  // moves) instead of queueing behind the data it checks.
  absl::StatusOr<std::unique_ptr<ControlRequest>> started =
      checks_->StartBitwise(BitOp::kOr, absl::MakeSpan(l.check));
  if (!started.ok()) {
    return absl::Status(
        started.status().code(),
        absl::StrCat("rank ", rank_, ": starting the planned check of ", UnitNames(l.responses),
                     " failed: ", started.status().message()));
  }
  l.request = *std::move(started);
  if (bucket.kind == BucketKind::kWhole) {
    auto [host, cuda] = SplitByDevice(std::move(ready));
    plane_.Submit(std::move(host));
    if (!cuda.empty()) {
      if (cuda_plane_ != nullptr) {
        cuda_plane_->Submit(std::move(cuda));
      } else {
        for (ReadyOp& r : cuda) {
          if (!r.op.has_value()) continue;
          OnDataDone(*r.op, absl::UnavailableError(absl::StrCat(
                                "rank ", rank_, ": planned allreduce '", r.response->name,
                                "': this planned executor has no CUDA plane")));
        }
      }
    }
    absl::Status s = plane_.Progress();
    if (s.ok() && cuda_plane_ != nullptr) s = cuda_plane_->Progress();
    return s;
  }
  return LaunchSliced(&l);
}

void PlannedMode::MakeDeviceRunner() {
  if (device_runner_ != nullptr || cuda_plane_->executor() == nullptr) return;
  absl::StatusOr<std::unique_ptr<BucketRunner>> runner =
      BucketRunner::Create(cuda_plane_->executor(), cuda_plane_->device(), rank_, size_, timeline_,
                           absl::Seconds(config_.collective_timeout_s + config_.stall_timeout_s));
  if (runner.ok()) {
    device_runner_ = *std::move(runner);
  } else {
    device_runner_error_ = runner.status();
  }
}

BucketRunner* PlannedMode::RunnerFor(const ExecutablePlan& plan, int bucket) {
  const ExecSlice& first = plan.buckets[static_cast<size_t>(bucket)].slices.front();
  const bool cuda =
      plan.entries[static_cast<size_t>(first.entry)].response->request.device == DeviceKind::kCuda;
  return cuda ? device_runner_.get() : host_runner_.get();
}

absl::Status PlannedMode::LaunchSliced(Launch* launch) {
  const ExecutablePlan& plan = *launch->plan;
  const ExecBucket& bucket = plan.buckets[static_cast<size_t>(launch->bucket)];
  launch->job = BucketRunner::NewJob(&plan, launch->bucket);
  BucketJob* job = launch->job.get();
  const bool current_delayed = delays_ != nullptr && launch->plan == plan_;
  if (current_delayed && !delays_->Due(launch->bucket, launch->pass)) {
    // Off its period: this pass's slices wait in the residual; the check still runs.
    std::vector<const PendingOp*> inputs;
    for (const ExecSlice& s : bucket.slices) {
      auto a = active_.find(s.entry);
      inputs.push_back(a != active_.end() && !a->second.diverged_here ? &a->second.op : nullptr);
    }
    absl::Status folded = delays_->Fold(launch->bucket, inputs);
    if (!folded.ok()) {
      return absl::Status(
          folded.code(),
          absl::StrCat("rank ", rank_, ": folding plan bucket ", launch->bucket, " (",
                       UnitNames(launch->responses), ") into its residual: ", folded.message()));
    }
    job->skipped = true;
    job->done = true;
    return absl::OkStatus();
  }
  BucketInput input;
  for (const ExecSlice& s : bucket.slices) {
    auto a = active_.find(s.entry);
    input.sources.push_back(BucketInput::Source{
        a != active_.end() && !a->second.diverged_here ? &a->second.op : nullptr});
  }
  // One whole tensor alone, not prescaled: reduced in the user's buffer, as the data plane does
  // for large tensors (nothing else of it can be pending, so no partial result is exposed). Not
  // under a delayed plan: its results are kept per pass, apart from the tensors.
  const ExecSlice& only = bucket.slices.front();
  const PendingOp* op = input.sources.front().op;
  input.in_place = delays_ == nullptr && bucket.slices.size() == 1 &&
                   job->kind == BucketKind::kAllreduce &&
                   plan.buckets_of[static_cast<size_t>(only.entry)].size() == 1 && op != nullptr &&
                   op->request.prescale == 1.0 && only.offset == 0 &&
                   only.count == op->request.tensors[0].NumElements();
  if (current_delayed) {
    input.drain = [this, b = launch->bucket](uint8_t* packed, BufferOps& ops) {
      return delays_->DrainResidual(b, packed, ops);
    };
  }
  BucketRunner* runner = RunnerFor(plan, launch->bucket);
  if (runner == nullptr) {
    // Every rank set the CUDA plane up at the same freeze, and it failed on every rank alike.
    absl::Status cause = device_runner_error_;
    if (cause.ok() && cuda_plane_ != nullptr) cause = cuda_plane_->SetUpOnce();
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank_, ": the plan's CUDA tensors (", UnitNames(launch->responses),
        ") cannot run: ",
        cuda_plane_ == nullptr ? absl::string_view("this planned executor has no CUDA plane")
                               : cause.message()));
  }
  absl::Status started = runner->Start(job, input);
  UpdateHeldBytes();
  return started;
}

void PlannedMode::OnChecked(Launch* launch) {
  launch->checked = true;
  launch->checked_at = absl::Now();
  const size_t n = launch->responses.size();
  if ((launch->check[0] & launch->check[1]) != 0) {
    // Its collective combined different tensors on different ranks: whatever it delivers is
    // wrong, so nothing of it is delivered and the job stops.
    stalled_ = absl::InternalError(absl::StrCat(
        "rank ", rank_, ": the frozen plan's unit ", launch->number, " (plan bucket ",
        launch->bucket, ": ", UnitNames(launch->responses),
        ") is not the same unit on every rank, so its results would be wrong; the job stops. "
        "This is a bug in overlap: please report it with the logs of OVERLAP_LOG_LEVEL=debug"));
    return;
  }
  launch->diverged.assign(n, false);
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if (TestBit(launch->check, kFingerprintBits + i)) {
      launch->diverged[i] = true;
      any = true;
    }
  }
  if (any) {
    std::vector<std::string> names;
    for (size_t i = 0; i < n; ++i) {
      if (launch->diverged[i]) names.push_back(absl::StrCat("'", launch->responses[i]->name, "'"));
    }
    spdlog::warn(
        "overlap: rank {}: {} submitted differently from the frozen plan on some rank; "
        "negotiating every operation again",
        rank_, absl::StrJoin(names, ", "));
    must_unfreeze_ = true;
  }
  size_t joined = 0;
  const size_t base = kFingerprintBits + Words(n) * 64;
  for (int r = 0; r < size_; ++r) {
    if (TestBit(launch->check, base + static_cast<size_t>(r))) ++joined;
  }
  if (joined == static_cast<size_t>(size_)) {
    // That unit was zeros everywhere; nobody starts another until the Join completes.
    join_ = JoinState::kAllJoined;
    next_bucket_ = 0;
    skip_.clear();
    if (held_join_.has_value()) {
      PendingOp join = std::move(*held_join_);
      held_join_.reset();
      join_ = JoinState::kNone;
      complete_(join, absl::OkStatus());
    }
  }
}

void PlannedMode::OnDataDone(PendingOp& op, const absl::Status& status) {
  for (Launch& l : launches_) {
    auto it = l.expected.find(op.request.name);
    if (it == l.expected.end()) continue;
    l.expected.erase(it);
    l.done.emplace_back(std::move(op), status);
    return;
  }
  complete_(op, status);  // cannot happen: every started operation has a launch
}

void PlannedMode::FinishDelayed(Launch* launch, std::vector<PendingOp>* renegotiate) {
  const ExecutablePlan& plan = *launch->plan;
  const bool diverged =
      std::find(launch->diverged.begin(), launch->diverged.end(), true) != launch->diverged.end();
  // A diverged bucket's result is never delivered: the plan is dropped right after this.
  if (!launch->job->skipped && !diverged) {
    delays_->Store(launch->bucket, launch->pass, std::move(launch->job->buffer));
  }
  for (size_t i = 0; i < launch->members.size(); ++i) {
    const int entry = launch->members[i];
    if (plan.buckets_of[static_cast<size_t>(entry)].back() != launch->bucket) continue;
    auto a = active_.find(entry);
    if (a == active_.end()) continue;  // joined here
    ActiveEntry active = std::move(a->second);
    active_.erase(a);
    delays_->Retire(active.op);
    if (launch->diverged[i] || active.diverged_here) {
      std::optional<PendingOp> parked = delays_->TakeParked(entry, active.op.plan_pass);
      if (parked.has_value()) renegotiate->push_back(std::move(*parked));
    }
    Feed(entry);
  }
  deliver_due_ = true;
}

void PlannedMode::FinishSliced(Launch* launch, std::vector<PendingOp>* renegotiate) {
  if (delays_ != nullptr && launch->plan == plan_) {
    FinishDelayed(launch, renegotiate);
    return;
  }
  const ExecutablePlan& plan = *launch->plan;
  BucketRunner* runner = RunnerFor(plan, launch->bucket);
  // Where this bucket's reduced values are, for the tensors still here.
  const std::vector<ExecSlice>& slices = plan.buckets[static_cast<size_t>(launch->bucket)].slices;
  std::vector<ReducedPiece> pieces = runner->Pieces(*launch->job);
  for (size_t i = 0; i < slices.size() && !launch->job->skipped; ++i) {
    auto a = active_.find(slices[i].entry);
    if (a != active_.end()) a->second.pieces.push_back(std::move(pieces[i]));
  }
  launch->job.reset();  // the pieces hold its buffer
  for (size_t i = 0; i < launch->members.size(); ++i) {
    const int entry = launch->members[i];
    if (plan.buckets_of[static_cast<size_t>(entry)].back() != launch->bucket) continue;
    auto a = active_.find(entry);
    if (a == active_.end()) continue;  // joined here, or sent back to negotiation meanwhile
    ActiveEntry active = std::move(a->second);
    active_.erase(a);
    PendingOp& op = active.op;
    if (op.plan_pass >= 0) continue;  // a dropped delayed plan's copy: its original went back
    if (launch->diverged[i] || active.diverged_here) {
      renegotiate->push_back(std::move(op));
      continue;
    }
    // Every slice is in: copy the averaged values out.
    runner->Deliver(std::move(op), std::move(active.pieces), complete_);
  }
}

void PlannedMode::Finish(Launch* launch, std::vector<PendingOp>* renegotiate) {
  if (launch->job != nullptr) {
    FinishSliced(launch, renegotiate);
    return;
  }
  absl::flat_hash_set<std::string> diverged;
  for (size_t i = 0; i < launch->responses.size(); ++i) {
    if (launch->diverged[i]) diverged.insert(launch->responses[i]->name);
  }
  for (PendingOp& op : launch->diverged_here) renegotiate->push_back(std::move(op));
  for (auto& [op, status] : launch->done) {
    if (diverged.contains(op.request.name) && status.ok()) {
      renegotiate->push_back(std::move(op));
    } else {
      complete_(op, status);
    }
  }
}

absl::Status PlannedMode::Progress(std::vector<PendingOp>* renegotiate) {
  if (!stalled_.ok()) return stalled_;
  absl::Status s = plane_.Progress();
  if (s.ok() && cuda_plane_ != nullptr) s = cuda_plane_->Progress();
  if (s.ok()) s = host_runner_->Progress();
  if (s.ok() && device_runner_ != nullptr) s = device_runner_->Progress();
  if (s.ok()) s = ProgressDelivering();
  if (!s.ok()) return s;
  const absl::Time now = absl::Now();
  for (Launch& l : launches_) {
    if (l.checked) {
      // Every rank started it: from here the ordinary collective timeout applies.
      if (!l.data_done() && now - l.checked_at > absl::Seconds(config_.collective_timeout_s)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "rank ", rank_, ": planned allreduce of ", UnitNames(l.responses),
            " did not complete within ",
            absl::ToInt64Seconds(absl::Seconds(config_.collective_timeout_s)),
            " s after every rank started it (OVERLAP_COLLECTIVE_TIMEOUT_S): a peer process is "
            "stuck or dead, or the network is down"));
      }
      continue;
    }
    absl::StatusOr<bool> done = l.request->Test();
    if (!done.ok()) {
      return absl::Status(
          done.status().code(),
          absl::StrCat("rank ", rank_, ": the planned check of ", UnitNames(l.responses),
                       " failed: ", done.status().message()));
    }
    if (*done) {
      OnChecked(&l);
      if (!stalled_.ok()) return stalled_;
      continue;
    }
    // OnReport names the ranks at the stall timeout; without a round this is the fallback.
    const absl::Duration age = now - l.started;
    if (age >= absl::Seconds(config_.stall_timeout_s + config_.collective_timeout_s)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", rank_, ": stalled: planned allreduce of ", UnitNames(l.responses),
          " started on this rank ", absl::ToInt64Seconds(age),
          " s ago and not started by every rank (OVERLAP_STALL_TIMEOUT_S=", config_.stall_timeout_s,
          ")"));
    }
    break;  // later launches cannot be unchecked
  }
  while (!launches_.empty() && launches_.front().checked && launches_.front().data_done()) {
    Finish(&launches_.front(), renegotiate);
    launches_.pop_front();
  }
  if (deliver_due_) Deliver();
  if (CanLaunch()) {
    s = LaunchNext();
    if (!s.ok()) return s;
  }
  // Blocked: nothing runs, tensors are here, but the next unit cannot start for want of others
  // on this rank. Cheapest test first: this runs on every turn of the coordinator's loop while
  // collectives are in flight, and HasUnlaunched walks every active tensor (a delayed plan keeps
  // them all active).
  const bool blocked =
      frozen_ && !must_unfreeze_ && launches_.empty() && !CanLaunch() && HasUnlaunched();
  if (!blocked) {
    blocked_since_ = absl::InfiniteFuture();
    blocked_warned_ = false;
    wants_unfreeze_ = false;
  } else {
    if (blocked_since_ == absl::InfiniteFuture()) blocked_since_ = now;
    if (now - blocked_since_ >= patience_) wants_unfreeze_ = true;
    if (now - blocked_since_ >= absl::Seconds(config_.stall_warning_s) && !blocked_warned_) {
      blocked_warned_ = true;
      std::vector<std::string> missing;
      for (const ExecSlice& slice : plan_->buckets[static_cast<size_t>(next_bucket_)].slices) {
        if (!waiting_.contains(slice.entry) && !active_.contains(slice.entry)) {
          missing.push_back(QuotedName(slice.entry));
        }
      }
      spdlog::warn(
          "overlap: rank {}: stall: the frozen plan's next unit waits for {} on this rank for {} s",
          rank_, absl::StrJoin(missing, ", "), absl::ToInt64Seconds(now - blocked_since_));
    }
  }
  return absl::OkStatus();
}

bool PlannedMode::TakeReportWish() {
  for (Launch& l : launches_) {
    if (l.checked) continue;
    const absl::Time now = absl::Now();
    if (now < l.next_probe) return false;
    const absl::Time timeout = l.started + absl::Seconds(config_.stall_timeout_s);
    l.next_probe = now + ProbeInterval(config_);
    if (now < timeout) l.next_probe = std::min(l.next_probe, timeout);
    return true;
  }
  return false;
}

void PlannedMode::ProbeWithin(absl::Duration within) {
  const absl::Time soon = absl::Now() + within;
  for (Launch& l : launches_) {
    if (!l.checked) l.next_probe = std::min(l.next_probe, soon);
  }
}

void PlannedMode::OnReport(const std::vector<uint64_t>& counts,
                           const std::vector<bool>& starts_nothing_more) {
  for (Launch& l : launches_) {
    if (l.checked) continue;
    std::vector<int> have, missing, gone;
    for (int r = 0; r < size_; ++r) {
      const bool started = counts[static_cast<size_t>(r)] >= l.number;
      (started ? have : missing).push_back(r);
      if (!started && starts_nothing_more[static_cast<size_t>(r)]) gone.push_back(r);
    }
    if (missing.empty()) return;  // every rank started it: only slow
    const absl::Duration age = absl::Now() - l.started;
    std::string others;
    if (l.responses.size() > 1) {
      std::vector<std::shared_ptr<const Response>> rest(l.responses.begin() + 1, l.responses.end());
      others = absl::StrCat(" (planned with ", UnitNames(rest), ")");
    }
    const std::string text =
        absl::StrCat("allreduce '", l.responses.front()->name, "'", others, ": submitted by ranks ",
                     RankList(have, hosts_), " but not by ranks ", RankList(missing, hosts_),
                     " for ", absl::ToInt64Seconds(age), " s");
    if (!gone.empty()) {
      // Started here, so it cannot be withdrawn, and those ranks will never start it.
      stalled_ = absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank_, ": cannot complete: planned ", text, "; ", ShutDownRanks(gone, hosts_),
          " and will start nothing more"));
      return;
    }
    if (age >= absl::Seconds(config_.stall_timeout_s)) {
      // A started collective cannot be withdrawn: the job cannot go on.
      stalled_ = absl::DeadlineExceededError(
          absl::StrCat("rank ", rank_, ": stalled: ", text,
                       ", past OVERLAP_STALL_TIMEOUT_S=", config_.stall_timeout_s));
    } else if (age >= absl::Seconds(config_.stall_warning_s) && !l.warned) {
      l.warned = true;
      if (rank_ == have.front()) {
        spdlog::warn("overlap: rank {}: stall: {} (fails after OVERLAP_STALL_TIMEOUT_S={})", rank_,
                     text, config_.stall_timeout_s);
      }
    }
    return;
  }
}

bool PlannedMode::TakeUnfreezeWish() {
  if (!wants_unfreeze_) return false;
  const absl::Time now = absl::Now();
  if (now - last_wish_ < patience_) return false;
  last_wish_ = now;
  return true;
}

absl::Time PlannedMode::NextDeadline() const {
  if (frozen_ && !waiting_.empty() && blocked_since_ == absl::InfiniteFuture()) {
    return absl::Now();  // Progress has not looked at these yet
  }
  absl::Time probe = absl::InfiniteFuture();
  for (const Launch& l : launches_) {
    if (!l.checked) probe = l.next_probe;
  }
  if (blocked_since_ == absl::InfiniteFuture()) return probe;
  absl::Time next = wants_unfreeze_ ? last_wish_ + patience_ : blocked_since_ + patience_;
  if (!blocked_warned_) {
    next = std::min(next, blocked_since_ + absl::Seconds(config_.stall_warning_s));
  }
  return std::min(next, probe);
}

std::string PlannedMode::DescribeStarted() const {
  std::vector<std::string> parts;
  for (const Launch& l : launches_) parts.push_back(UnitNames(l.responses));
  return absl::StrJoin(parts, "; ");
}

std::string PlannedMode::QuotedName(int entry) const {
  return absl::StrCat("'", plan_->entries[static_cast<size_t>(entry)].response->name, "'");
}

std::string PlannedMode::DescribeDrain() const {
  if (!frozen_) return "no plan in force";
  std::vector<std::string> started, waiting, active, queued;
  for (const Launch& l : launches_) {
    started.push_back(
        absl::StrCat("bucket ", l.bucket, " of pass ", l.pass,
                     l.checked ? (l.data_done() ? " (done)" : " (sending)") : " (checking)"));
  }
  for (const auto& [entry, op] : waiting_) waiting.push_back(QuotedName(entry));
  for (const auto& [entry, a] : active_) {
    active.push_back(absl::StrCat(QuotedName(entry), " (", a.launched, " of ",
                                  plan_->buckets_of[static_cast<size_t>(entry)].size(),
                                  " buckets started)"));
  }
  for (const auto& [entry, line] : backlog_) {
    if (!line.empty()) queued.push_back(absl::StrCat(QuotedName(entry), " x", line.size()));
  }
  for (auto* list : {&waiting, &active, &queued}) std::sort(list->begin(), list->end());
  auto listed = [](const std::vector<std::string>& v) {
    return v.empty() ? std::string("none") : absl::StrJoin(v, ", ");
  };
  return absl::StrCat("pass ", pass_, ", next bucket ", next_bucket_, " of ", plan_->buckets.size(),
                      "; started: ", listed(started), "; submitted, not started: ", listed(waiting),
                      "; partly started: ", listed(active), "; in line: ", listed(queued));
}

void PlannedMode::AbortCuda() {
  if (cuda_plane_ != nullptr) cuda_plane_->Abort();
}

std::vector<PendingOp> PlannedMode::FailAll(const absl::Status& status) {
  plane_.FailAll(status);
  if (cuda_plane_ != nullptr) cuda_plane_->FailAll(status);
  for (Launch& l : launches_) {
    for (auto& [op, s] : l.done) complete_(op, status);
    for (PendingOp& op : l.diverged_here) complete_(op, status);
  }
  launches_.clear();
  host_runner_->FailAll(status);
  if (device_runner_ != nullptr) device_runner_->FailAll(status);
  for (Delivering& d : delivering_) {
    for (PendingOp& op : d.ops) complete_(op, status);
  }
  delivering_.clear();
  for (auto& [entry, active] : active_) {
    if (active.op.plan_pass < 0) complete_(active.op, status);
  }
  active_.clear();
  backlog_.clear();
  if (delays_ != nullptr) {
    for (PendingOp& op : delays_->TakeAllParked()) complete_(op, status);
    UpdateHeldBytes();
  }
  if (held_join_.has_value()) {
    complete_(*held_join_, status);
    held_join_.reset();
  }
  std::vector<PendingOp> unstarted;
  for (auto& [entry, op] : waiting_) {
    if (op.plan_pass < 0) unstarted.push_back(std::move(op));
  }
  waiting_.clear();
  return unstarted;
}

}  // namespace overlap
