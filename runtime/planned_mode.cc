#include "runtime/planned_mode.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/mpi_executor.h"
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

}  // namespace

PlannedMode::PlannedMode(std::unique_ptr<Executor> executor, MPI_Comm check_comm,
                         const Config& config, int rank, int size, std::vector<std::string> hosts,
                         Timeline* timeline, CompressionStage* compression,
                         DataPlane::CompleteFn complete)
    : config_(config),
      rank_(rank),
      size_(size),
      hosts_(std::move(hosts)),
      timeline_(timeline),
      complete_(std::move(complete)),
      executor_(std::move(executor)),
      check_comm_(check_comm),
      plane_(
          executor_.get(), PlaneConfig(config), rank, size, timeline, compression,
          [this](PendingOp& op, const absl::Status& status) { OnDataDone(op, status); },
          "planned ") {}

PlannedMode::~PlannedMode() {
  if (check_comm_ != MPI_COMM_NULL) MPI_Comm_free(&check_comm_);
}

void PlannedMode::Freeze(std::vector<PlanEntry> entries, const std::vector<int64_t>& groups,
                         const absl::flat_hash_set<int32_t>& already_agreed,
                         absl::Duration step_time) {
  entries_ = std::move(entries);
  units_ = MakeLaunchUnits(entries_, groups, kFirstUnitBytes, kUnitBytes);
  entry_of_.clear();
  planned_ids_.clear();
  for (int i = 0; i < static_cast<int>(entries_.size()); ++i) {
    entry_of_[entries_[static_cast<size_t>(i)].response->name] = i;
    planned_ids_.insert(entries_[static_cast<size_t>(i)].cache_id);
  }
  skip_.clear();
  for (int32_t id : already_agreed) {
    if (planned_ids_.contains(id)) skip_.insert(id);
  }
  next_unit_ = 0;
  frozen_ = true;
  must_unfreeze_ = false;
  patience_ = std::max(absl::Seconds(1), 4 * step_time);
  blocked_since_ = absl::InfiniteFuture();
  blocked_warned_ = false;
  wants_unfreeze_ = false;
  spdlog::info("overlap: rank {}: planned execution of {} tensors in {} units", rank_,
               entries_.size(), units_.size());
}

std::vector<PendingOp> PlannedMode::Unfreeze() {
  std::vector<PendingOp> unstarted;
  for (auto& [entry, op] : waiting_) unstarted.push_back(std::move(op));
  waiting_.clear();
  frozen_ = false;
  must_unfreeze_ = false;
  entries_.clear();
  units_.clear();
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
  waiting_.emplace(entry, std::move(op));
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
  if (!frozen_ || must_unfreeze_ || join_ == JoinState::kAllJoined || units_.empty()) return false;
  for (const Launch& l : launches_) {
    if (!l.checked) return false;  // unit k+1 waits for unit k's check
  }
  if (join_ == JoinState::kJoined) return true;
  for (int entry : units_[static_cast<size_t>(next_unit_)]) {
    if (skip_.contains(entries_[static_cast<size_t>(entry)].cache_id)) continue;
    if (!waiting_.contains(entry)) return false;
  }
  return true;
}

void PlannedMode::Advance() {
  ++next_unit_;
  if (next_unit_ == static_cast<int>(units_.size())) {
    next_unit_ = 0;
    skip_.clear();  // the first pass is over
  }
}

absl::Status PlannedMode::LaunchNext() {
  const std::vector<int>& unit = units_[static_cast<size_t>(next_unit_)];
  Launch launch;
  launch.unit = next_unit_;
  launch.started = absl::Now();
  std::vector<ReadyOp> ready;
  std::vector<int> members;
  for (int entry : unit) {
    if (!skip_.contains(entries_[static_cast<size_t>(entry)].cache_id)) members.push_back(entry);
  }
  launch.check.assign(Words(members.size()) + Words(static_cast<size_t>(size_)), 0);
  for (size_t i = 0; i < members.size(); ++i) {
    const PlanEntry& e = entries_[static_cast<size_t>(members[i])];
    launch.responses.push_back(e.response);
    auto it = waiting_.find(members[i]);
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
      SetBit(&launch.check, i);
      launch.diverged_here.push_back(std::move(op));
      ready.push_back(ReadyOp{e.response, std::nullopt});
    }
  }
  if (join_ == JoinState::kJoined) {
    SetBit(&launch.check, Words(members.size()) * 64 + static_cast<size_t>(rank_));
  }
  Advance();
  ++launch_count_;
  launch.number = launch_count_;
  launch.next_probe = launch.started + ProbeInterval(config_);
  blocked_since_ = absl::InfiniteFuture();
  blocked_warned_ = false;
  launches_.push_back(std::move(launch));
  Launch& l = launches_.back();
  if (members.empty()) {  // the whole unit was agreed by negotiation before the freeze
    l.checked = true;
    l.diverged.assign(0, false);
    return absl::OkStatus();
  }
  // The data first: the check is small and catches up.
  plane_.Submit(std::move(ready));
  const absl::Status started = plane_.Progress();
  PrepareIallreduce(l.check.size() * sizeof(uint64_t));
  MPI_Iallreduce(MPI_IN_PLACE, l.check.data(), static_cast<int>(l.check.size()), MPI_UINT64_T,
                 MPI_BOR, check_comm_, &l.request);
  return started;
}

void PlannedMode::OnChecked(Launch* launch) {
  launch->checked = true;
  launch->checked_at = absl::Now();
  const size_t n = launch->responses.size();
  launch->diverged.assign(n, false);
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if (TestBit(launch->check, i)) {
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
  const size_t base = Words(n) * 64;
  for (int r = 0; r < size_; ++r) {
    if (TestBit(launch->check, base + static_cast<size_t>(r))) ++joined;
  }
  if (joined == static_cast<size_t>(size_)) {
    // That unit was zeros everywhere; nobody starts another until the Join completes.
    join_ = JoinState::kAllJoined;
    next_unit_ = 0;
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

void PlannedMode::Finish(Launch* launch, std::vector<PendingOp>* renegotiate) {
  absl::flat_hash_set<std::string> diverged;
  for (size_t i = 0; i < launch->responses.size(); ++i) {
    if (launch->diverged[i]) diverged.insert(launch->responses[i]->name);
  }
  auto back_to_negotiation = [&](PendingOp op) {
    op.cache_id = -1;
    op.sent = false;
    renegotiate->push_back(std::move(op));
  };
  for (PendingOp& op : launch->diverged_here) back_to_negotiation(std::move(op));
  for (auto& [op, status] : launch->done) {
    if (diverged.contains(op.request.name) && status.ok()) {
      back_to_negotiation(std::move(op));
    } else {
      complete_(op, status);
    }
  }
}

absl::Status PlannedMode::Progress(std::vector<PendingOp>* renegotiate) {
  if (!stalled_.ok()) return stalled_;
  absl::Status s = plane_.Progress();
  if (!s.ok()) return s;
  const absl::Time now = absl::Now();
  for (Launch& l : launches_) {
    if (l.checked) {
      // Every rank started it: from here the ordinary collective timeout applies.
      if (!l.expected.empty() && now - l.checked_at > absl::Seconds(config_.collective_timeout_s)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "rank ", rank_, ": planned allreduce of ", UnitNames(l.responses),
            " did not complete within ",
            absl::ToInt64Seconds(absl::Seconds(config_.collective_timeout_s)),
            " s after every rank started it (OVERLAP_COLLECTIVE_TIMEOUT_S): a peer process is "
            "stuck or dead, or the network is down"));
      }
      continue;
    }
    int done = 0;
    if (MPI_Test(&l.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return absl::InternalError(
          absl::StrCat("rank ", rank_, ": planned check of ", UnitNames(l.responses), " failed"));
    }
    if (done) {
      OnChecked(&l);
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
  while (!launches_.empty() && launches_.front().checked && launches_.front().expected.empty()) {
    Finish(&launches_.front(), renegotiate);
    launches_.pop_front();
  }
  if (CanLaunch()) {
    s = LaunchNext();
    if (!s.ok()) return s;
  }
  // Blocked: tensors are here but the next unit cannot start for want of others on this rank.
  const bool blocked =
      frozen_ && !must_unfreeze_ && !waiting_.empty() && !CanLaunch() &&
      std::all_of(launches_.begin(), launches_.end(), [](const Launch& l) { return l.checked; });
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
      for (int entry : units_[static_cast<size_t>(next_unit_)]) {
        if (!waiting_.contains(entry)) {
          missing.push_back(
              absl::StrCat("'", entries_[static_cast<size_t>(entry)].response->name, "'"));
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

void PlannedMode::OnReport(const std::vector<uint64_t>& counts) {
  for (Launch& l : launches_) {
    if (l.checked) continue;
    std::vector<int> have, missing;
    for (int r = 0; r < size_; ++r) {
      (counts[static_cast<size_t>(r)] >= l.number ? have : missing).push_back(r);
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

std::string PlannedMode::UnitNames(
    const std::vector<std::shared_ptr<const Response>>& responses) const {
  std::vector<std::string> names;
  for (size_t i = 0; i < responses.size() && i < 3; ++i) {
    names.push_back(absl::StrCat("'", responses[i]->name, "'"));
  }
  std::string text = absl::StrJoin(names, ", ");
  if (responses.size() > 3) absl::StrAppend(&text, " and ", responses.size() - 3, " more");
  return text;
}

std::string PlannedMode::DescribeStarted() const {
  std::vector<std::string> parts;
  for (const Launch& l : launches_) parts.push_back(UnitNames(l.responses));
  return absl::StrJoin(parts, "; ");
}

std::vector<PendingOp> PlannedMode::FailAll(const absl::Status& status) {
  plane_.FailAll(status);
  for (Launch& l : launches_) {
    for (auto& [op, s] : l.done) complete_(op, status);
    for (PendingOp& op : l.diverged_here) complete_(op, status);
  }
  launches_.clear();
  if (held_join_.has_value()) {
    complete_(*held_join_, status);
    held_join_.reset();
  }
  std::vector<PendingOp> unstarted;
  for (auto& [entry, op] : waiting_) unstarted.push_back(std::move(op));
  waiting_.clear();
  return unstarted;
}

}  // namespace overlap
