// PlannedMode's watch over started and blocked units (runtime/planes/planned_mode.h): the probes
// that ask which ranks have started a unit, the stall warnings and errors naming them, the wish to
// drop a plan this rank is blocked on, and the descriptions of what is in flight for messages.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/negotiation/rank_bits.h"
#include "runtime/planes/planned_mode.h"
#include "spdlog/spdlog.h"

namespace overlap {

absl::Duration PlannedMode::ProbeInterval(const Config& config) {
  return absl::Seconds(std::min(config.stall_warning_s, config.collective_timeout_s / 4));
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
          "rank ", rank_, ": cannot complete: planned allreduce '", l.responses.front()->name, "'",
          others, ": submitted by ranks ", RankList(have, hosts_), " ",
          MissingBecauseShutDown(missing, gone, hosts_, "start")));
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
    if (!l.checked) probe = std::min(probe, l.next_probe);
  }
  if (blocked_since_ == absl::InfiniteFuture()) return probe;
  absl::Time next = wants_unfreeze_ ? last_wish_ + patience_ : blocked_since_ + patience_;
  if (!wants_unfreeze_ && MovedOn().has_value()) next = blocked_since_ + moved_on_grace_;
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

}  // namespace overlap
