// PlannedMode (runtime/planes/planned_mode.h): freezing and dropping a plan, starting units with
// their checks, and finishing whole-tensor buckets. Sliced buckets and delayed plans are in
// planned_sliced.cc; stall probes, warnings and descriptions in planned_stalls.cc.
#include "runtime/planes/planned_mode.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "collectives/scaling.h"
#include "runtime/negotiation/rank_bits.h"
#include "runtime/planes/device_backend.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

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

// "'a' (1 result), 'b' (1 result), 'c' (a residual) and 19 more tensors": a plan of hundreds of
// tensors would otherwise log them all.
std::string SummarizeHeld(const std::vector<std::string>& held) {
  constexpr size_t kNamed = 3;
  if (held.size() <= kNamed) return absl::StrJoin(held, ", ");
  return absl::StrCat(absl::StrJoin(held.begin(), held.begin() + kNamed, ", "), " and ",
                      held.size() - kNamed, " more tensors");
}

}  // namespace

PlannedMode::PlannedMode(std::unique_ptr<Executor> executor,
                         std::unique_ptr<ControlCollectives> checks, PlaneContext context,
                         std::vector<std::string> hosts, const CudaPlaneFactory& make_cuda_plane)
    : config_(context.config),
      rank_(checks->rank()),
      size_(checks->size()),
      hosts_(std::move(hosts)),
      timeline_(context.timeline),
      complete_(std::move(context.complete)),
      executor_(std::move(executor)),
      checks_(std::move(checks)),
      plane_(executor_.get(), PlanesContext(context), "planned "),
      host_runner_(*BucketRunner::Create(
          executor_.get(), Device::Cpu(), rank_, size_, timeline_,
          absl::Seconds(config_.collective_timeout_s + config_.stall_timeout_s),
          context.compression)),
      compression_(context.compression),
      poke_([this] { executor_->Poke(); }) {
  if (make_cuda_plane != nullptr) cuda_plane_ = make_cuda_plane(PlanesContext(context));
}

PlaneContext PlannedMode::PlanesContext(const PlaneContext& context) {
  return PlaneContext{PlaneConfig(context.config),
                      rank_,
                      size_,
                      context.timeline,
                      context.compression,
                      [this](PendingOp& op, const absl::Status& status) { OnDataDone(op, status); },
                      context.comm_meter};
}

void PlannedMode::Freeze(ExecutablePlan plan, const absl::flat_hash_set<int32_t>& already_agreed,
                         absl::Duration step_time) {
  plan.Index();
  if (plan_ != nullptr) ReleaseResiduals(*plan_, plan);
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
  stop_.reset();
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
  moved_on_grace_ = std::min(patience_, std::max(absl::Milliseconds(20), step_time / 4));
  blocked_since_ = absl::InfiniteFuture();
  blocked_warned_ = false;
  wants_unfreeze_ = false;
  last_wish_ = absl::InfinitePast();  // a wish about the plan this one replaces holds none back
  spdlog::info("overlap: rank {}: planned execution ({}) of {} tensors in {} buckets", rank_,
               plan_->source, plan_->entries.size(), plan_->buckets.size());
}

void PlannedMode::ReleaseResiduals(const ExecutablePlan& old_plan, const ExecutablePlan& new_plan) {
  if (compression_ == nullptr) return;
  absl::flat_hash_set<std::string> kept;
  for (const ExecBucket& b : new_plan.buckets) {
    if (!b.compression_key.empty()) kept.insert(b.compression_key);
  }
  std::vector<std::string> retired;
  for (const ExecBucket& b : old_plan.buckets) {
    if (!b.compression_key.empty() && !kept.contains(b.compression_key)) {
      retired.push_back(b.compression_key);
    }
  }
  if (retired.empty()) return;
  const size_t bytes = compression_->Release(retired);
  spdlog::info(
      "overlap: rank {}: freed {} bytes of residuals of {} compressed buckets of the {} "
      "plan the new one replaces",
      rank_, bytes, retired.size(), old_plan.source);
}

std::vector<PendingOp> PlannedMode::Unfreeze(UnfreezeCause cause) {
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
    // Every rank holds the same tensors (the plan is the same everywhere): rank 0 warns, the
    // others keep it to their info log, so a job of many ranks prints one line, not one each.
    if (!held.empty()) {
      const auto level = rank_ == 0 ? spdlog::level::warn : spdlog::level::info;
      if (cause == UnfreezeCause::kShutdown) {
        spdlog::log(level,
                    "overlap: rank {}: shutdown under the delayed plan leaves the last steps' "
                    "updates of {} unapplied (a program that wants them runs as many more steps "
                    "as the plan's delay, first)",
                    rank_, SummarizeHeld(held));
      } else {
        spdlog::log(level,
                    "overlap: rank {}: leaving the delayed plan discards the delayed updates of "
                    "{}; steps still waiting for theirs are reduced again synchronously",
                    rank_, SummarizeHeld(held));
      }
    }
    for (PendingOp& op : delays_->TakeAllParked()) unstarted.push_back(std::move(op));
    delays_.reset();
    UpdateHeldBytes();
  }
  frozen_ = false;
  must_unfreeze_ = false;
  stop_.reset();
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
  if (stop_.has_value() && launch_count_ >= stop_->at) return false;
  const int unchecked = Unchecked();
  if (unchecked >= config_.plan_check_window) return false;
  // A pass starts only once every check of the last one is in, so that a stop never waits for
  // the next step's submissions.
  if (next_bucket_ == 0 && unchecked > 0) return false;
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

std::optional<std::pair<int, int>> PlannedMode::MovedOn() const {
  // Under a delayed plan copies of the next steps' submissions wait in line by design.
  if (delays_ != nullptr) return std::nullopt;
  for (const auto& [entry, op] : waiting_) {
    // Bucket b starts only once all its tensors are here, so a waiting tensor whose first bucket
    // lies behind the next one is its next step's submission; so is one that negotiation agreed
    // for the step in progress when the plan froze (the first pass skips it).
    if (plan_->buckets_of[static_cast<size_t>(entry)].front() >= next_bucket_ &&
        !skip_.contains(plan_->entries[static_cast<size_t>(entry)].cache_id)) {
      continue;
    }
    for (const ExecSlice& slice : plan_->buckets[static_cast<size_t>(next_bucket_)].slices) {
      if (skip_.contains(plan_->entries[static_cast<size_t>(slice.entry)].cache_id)) continue;
      if (!waiting_.contains(slice.entry) && !active_.contains(slice.entry)) {
        return std::make_pair(entry, slice.entry);
      }
    }
  }
  return std::nullopt;
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

uint64_t PlannedMode::StopFor(const Launch& launch) const {
  const auto left_in_pass =
      static_cast<uint64_t>(launch.plan->buckets.size()) - 1 - static_cast<uint64_t>(launch.bucket);
  return launch.number +
         std::min(static_cast<uint64_t>(config_.plan_check_window - 1), left_in_pass);
}

int PlannedMode::Unchecked() const {
  return static_cast<int>(std::count_if(launches_.begin(), launches_.end(),
                                        [](const Launch& l) { return !l.checked; }));
}

void PlannedMode::ApplyStop() {
  if (!stop_.has_value() || launch_count_ < stop_->at || Unchecked() > 0) return;
  const PlanStop stop = *stop_;
  stop_.reset();
  if (stop.diverged) must_unfreeze_ = true;
  if (stop.all_joined) {
    // Those units were zeros everywhere; nobody starts another until the Join completes.
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
  }
  size_t joined = 0;
  const size_t base = kFingerprintBits + Words(n) * 64;
  for (int r = 0; r < size_; ++r) {
    if (TestBit(launch->check, base + static_cast<size_t>(r))) ++joined;
  }
  const bool all_joined = joined == static_cast<size_t>(size_);
  if (!any && !all_joined) return;
  // Later checks of the window may add to the stop, never move it: each rank sees the checks in
  // the same order, so the first one that sets it is the same everywhere.
  if (!stop_.has_value()) stop_ = PlanStop{StopFor(*launch)};
  stop_->diverged |= any;
  stop_->all_joined |= all_joined;
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
  ApplyStop();
  if (deliver_due_) Deliver();
  while (CanLaunch()) {
    s = LaunchNext();
    if (!s.ok()) return s;
  }
  ApplyStop();  // a unit the first pass skips is checked as it starts
  // Blocked: nothing runs, tensors are here, but the next unit cannot start for want of others
  // on this rank. Cheapest test first: this runs on every turn of the coordinator's loop while
  // collectives are in flight, and HasUnlaunched walks every active tensor (a delayed plan keeps
  // them all active).
  const bool blocked =
      frozen_ && !must_unfreeze_ && launches_.empty() && !CanLaunch() && HasUnlaunched();
  // A check set a stop this rank cannot reach with what its program submitted: the program may
  // wait for a result first (the diverged tensor's, which only a drop delivers). Every rank that
  // started as many units drops the plan in the round this asks for.
  const bool short_of_stop =
      stop_.has_value() && launch_count_ < stop_->at && !CanLaunch() && Unchecked() == 0;
  if (short_of_stop && !wants_unfreeze_) {
    wants_unfreeze_ = true;
    spdlog::info(
        "overlap: rank {}: a check stopped the frozen plan at unit {}, which this rank cannot "
        "reach with the tensors submitted (it started {}): asking to drop the plan",
        rank_, stop_->at, launch_count_);
  }
  if (!blocked) {
    blocked_since_ = absl::InfiniteFuture();
    blocked_warned_ = false;
    if (!short_of_stop) wants_unfreeze_ = false;
  } else {
    if (blocked_since_ == absl::InfiniteFuture()) blocked_since_ = now;
    const absl::Duration blocked_for = now - blocked_since_;
    if (!wants_unfreeze_ && blocked_for >= moved_on_grace_) {
      const std::optional<std::pair<int, int>> moved_on = MovedOn();
      if (moved_on.has_value()) {
        wants_unfreeze_ = true;
        spdlog::info(
            "overlap: rank {}: the program went on to its next step ({} submitted again) without "
            "{}, which the frozen plan's next unit waits for: asking to drop the plan",
            rank_, QuotedName(moved_on->first), QuotedName(moved_on->second));
      }
    }
    if (blocked_for >= patience_) wants_unfreeze_ = true;
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
