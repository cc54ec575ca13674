#include "launcher/failure_log.h"

#include <algorithm>
#include <csignal>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace overlap::launcher {

std::optional<std::string> ParseLostDaemonHost(absl::string_view line) {
  constexpr absl::string_view kDaemon = "Remote daemon:", kNode = " on node ";
  const size_t daemon = line.find(kDaemon);
  if (daemon == absl::string_view::npos) {
    return std::nullopt;
  }
  const size_t node = line.find(kNode, daemon);
  if (node == absl::string_view::npos) {
    return std::nullopt;
  }
  absl::string_view host = absl::StripAsciiWhitespace(line.substr(node + kNode.size()));
  if (host.empty() || host.find(' ') != absl::string_view::npos) {
    return std::nullopt;
  }
  return std::string(host);
}

namespace {

// The reporting rank of a control-plane line: "rank N" just before `lost`, where the runtime's
// message starts (spdlog and the program may prefix the line).
std::optional<int> ReporterBefore(absl::string_view line, size_t lost) {
  const size_t rank_word = line.rfind("rank ", lost);
  int reporter = -1;
  if (rank_word == absl::string_view::npos ||
      !absl::SimpleAtoi(line.substr(rank_word + 5, lost - rank_word - 5), &reporter)) {
    return std::nullopt;
  }
  return reporter;
}

}  // namespace

std::optional<UnansweredPeer> ParseUnansweredPeer(absl::string_view line) {
  constexpr absl::string_view kLost = ": lost the control connection to rank ", kHost = " (host ",
                              kSilent = "): no answer for ";
  const size_t lost = line.find(kLost);
  if (lost == absl::string_view::npos) {
    return std::nullopt;
  }
  const std::optional<int> reporter = ReporterBefore(line, lost);
  if (!reporter) {
    return std::nullopt;
  }
  const size_t host = line.find(kHost, lost + kLost.size());
  if (host == absl::string_view::npos) {
    return std::nullopt;
  }
  const size_t silent = line.find(kSilent, host + kHost.size());
  if (silent == absl::string_view::npos) {
    return std::nullopt;
  }
  absl::string_view name = line.substr(host + kHost.size(), silent - host - kHost.size());
  if (name.empty() || name.find_first_of(" ()") != absl::string_view::npos) {
    return std::nullopt;
  }
  return UnansweredPeer{*reporter, std::string(name)};
}

std::optional<ExitedPeer> ParseExitedPeer(absl::string_view line) {
  constexpr absl::string_view kLost = ": lost the control connection to rank ",
                              kExited = "): the process exited or shut down early";
  const size_t lost = line.find(kLost);
  if (lost == absl::string_view::npos || line.find(kExited, lost) == absl::string_view::npos) {
    return std::nullopt;
  }
  const size_t from = lost + kLost.size();
  const size_t end = line.find(" (host ", from);
  ExitedPeer seen;
  if (end == absl::string_view::npos ||
      !absl::SimpleAtoi(line.substr(from, end - from), &seen.peer) || seen.peer < 0) {
    return std::nullopt;
  }
  seen.reporter = std::max(-1, ReporterBefore(line, lost).value_or(-1));  // -1: not named
  return seen;
}

FailureLog::FailureLog(std::vector<std::string> rank_hosts) : rank_hosts_(std::move(rank_hosts)) {}

std::string FailureLog::HostOf(int rank) const {
  return rank >= 0 && static_cast<size_t>(rank) < rank_hosts_.size()
             ? rank_hosts_[static_cast<size_t>(rank)]
             : std::string();
}

std::string FailureLog::HostAndRanks(const std::string& host) const {
  std::vector<std::string> ranks;
  for (size_t rank = 0; rank < rank_hosts_.size(); ++rank) {
    if (rank_hosts_[rank] == host) {
      ranks.push_back(absl::StrCat(rank));
    }
  }
  if (ranks.empty()) {
    return host;
  }
  return absl::StrCat(host, " (", ranks.size() == 1 ? "rank " : "ranks ",
                      absl::StrJoin(ranks, ", "), ")");
}

void FailureLog::AddExitedPeer(int peer, int reporter) {
  if (reporter >= 0) {
    exited_seen_by_.emplace_back(peer, reporter);
  }
  if (std::find(exited_peers_.begin(), exited_peers_.end(), peer) == exited_peers_.end()) {
    exited_peers_.push_back(peer);
  }
  if (!announced_ && std::find(exited_unprompted_.begin(), exited_unprompted_.end(), peer) ==
                         exited_unprompted_.end()) {
    exited_unprompted_.push_back(peer);
  }
}

bool FailureLog::OnItsOwn(const RankReport& r) const {
  return !r.stopped_by_launcher || std::find(exited_unprompted_.begin(), exited_unprompted_.end(),
                                             r.rank) != exited_unprompted_.end();
}

bool FailureLog::Add(const RankReport& report) {
  reports_.push_back(report);
  if (announced_ || report.stopped_by_launcher) {
    return false;
  }
  announced_ = true;
  return true;
}

bool FailureLog::AddLostHost(const std::string& host, int reporter, int64_t at_ms) {
  lost_.push_back(LostContact{host, reporter});
  if (lost_.size() > 1) {
    return false;
  }
  lost_at_ms_ = at_ms;
  announced_ = true;  // rank failures after this one are its consequences
  return true;
}

FailureLog::Blame FailureLog::BlameLostHost() const {
  constexpr absl::string_view kDown = ": the host or its network is down";
  for (const LostContact& lost : lost_) {
    if (lost.reporter < 0) {
      return {lost.host,
              absl::StrCat("mpirun lost contact with host ", HostAndRanks(lost.host), kDown)};
    }
  }
  const LostContact& first = lost_.front();
  const std::string reporter_host = HostOf(first.reporter);
  // A worker hears only rank 0. If a rank on a third host saw a process on rank 0's host exit,
  // that host's network worked, and the worker's own host is the one that went silent.
  if (first.reporter != 0 && !reporter_host.empty() && reporter_host != first.host &&
      first.host == HostOf(0)) {
    for (const auto& [peer, seer] : exited_seen_by_) {
      const std::string seer_host = HostOf(seer);
      if (HostOf(peer) == first.host && !seer_host.empty() && seer_host != first.host &&
          seer_host != reporter_host) {
        return {reporter_host,
                absl::StrCat("rank ", first.reporter, " on host ", reporter_host,
                             " stopped hearing from host ", HostAndRanks(first.host),
                             ", which ranks on other hosts still heard from: host ",
                             HostAndRanks(reporter_host), " or its network is down")};
      }
    }
  }
  // Rank 0 hears every worker: losing two or more hosts at once points at its own.
  if (first.reporter == 0 && !reporter_host.empty()) {
    std::vector<std::string> silent;
    for (const LostContact& lost : lost_) {
      if (lost.reporter == 0 && lost.host != reporter_host &&
          std::find(silent.begin(), silent.end(), lost.host) == silent.end()) {
        silent.push_back(lost.host);
      }
    }
    if (silent.size() >= 2) {
      return {reporter_host, absl::StrCat("rank 0 lost contact with hosts ",
                                          absl::StrJoin(silent, ", "), " at once: host ",
                                          HostAndRanks(reporter_host), " or its network is down")};
    }
  }
  return {first.host, absl::StrCat("rank ", first.reporter, " lost contact with host ",
                                    HostAndRanks(first.host), kDown)};
}

std::string FailureLog::LostHostSentence() const { return BlameLostHost().sentence; }

std::string FailureLog::BlamedHost() const {
  if (!lost_.empty()) {
    return BlameLostHost().host;
  }
  const std::optional<RankReport> cause = Cause();
  if (!cause) {
    return "";
  }
  // The name the host list gives (what a discovery script prints), else the rank's own.
  const std::string listed = HostOf(cause->rank);
  return listed.empty() ? cause->host : listed;
}

bool FailureLog::Reported(int rank) const {
  for (const RankReport& r : reports_) {
    if (r.rank == rank) {
      return true;
    }
  }
  return false;
}

std::optional<RankReport> FailureLog::Cause() const {
  // A rank killed by SIGPIPE wrote to a pipe or socket whose other end had closed: its stderr
  // after mpirun tore the job down, or a peer that was already gone. It is a consequence, and is
  // blamed only when no rank failed otherwise.
  std::vector<RankReport> own, own_not_sigpipe;
  for (const RankReport& r : reports_) {
    if (OnItsOwn(r)) {
      own.push_back(r);
      if (!(r.how == RankReport::How::kSignaled && r.code == SIGPIPE)) {
        own_not_sigpipe.push_back(r);
      }
    }
  }
  const std::vector<RankReport>& pool =
      !own_not_sigpipe.empty() ? own_not_sigpipe : (own.empty() ? reports_ : own);
  if (pool.empty()) {
    return std::nullopt;
  }
  const RankReport* earliest = &pool[0];
  for (const RankReport& r : pool) {
    if (r.end_ms < earliest->end_ms) {
      earliest = &r;
    }
  }
  // Within the window, one rank that ended differently from all the others (which ended alike)
  // is the cause even if its wrapper reported a few ms late.
  std::vector<const RankReport*> window;
  for (const RankReport& r : pool) {
    if (r.end_ms <= earliest->end_ms + kSimultaneousMs) {
      window.push_back(&r);
    }
  }
  // A rank killed by a signal the launcher did not send failed on its own: peers that notice a
  // failure exit with an error status, they are not killed. When only one rank in the window was,
  // it is the cause, even with only one peer reported beside it.
  const RankReport* signaled = nullptr;
  int signaled_count = 0;
  for (const RankReport* r : window) {
    if (r->how == RankReport::How::kSignaled) {
      signaled = r;
      ++signaled_count;
    }
  }
  if (signaled_count == 1) {
    return *signaled;
  }
  // Its peers saw exactly one of these ranks exit under them.
  const RankReport* seen_exiting = nullptr;
  int seen_count = 0;
  for (const RankReport* r : window) {
    if (std::find(exited_peers_.begin(), exited_peers_.end(), r->rank) != exited_peers_.end()) {
      seen_exiting = r;
      ++seen_count;
    }
  }
  if (seen_count == 1) {
    return *seen_exiting;
  }
  auto same_end = [](const RankReport* a, const RankReport* b) {
    return a->how == b->how && a->code == b->code;
  };
  if (window.size() >= 3) {
    for (const RankReport* odd : window) {
      const RankReport* other = nullptr;
      bool others_alike = true, odd_unique = true;
      for (const RankReport* r : window) {
        if (r == odd) {
          continue;
        }
        if (same_end(r, odd)) {
          odd_unique = false;
        }
        if (other == nullptr) {
          other = r;
        } else if (!same_end(r, other)) {
          others_alike = false;
        }
      }
      if (odd_unique && others_alike) {
        return *odd;
      }
    }
  }
  return *earliest;
}

std::string FailureLog::Summary(int64_t job_end_ms) const {
  if (!lost_.empty()) {
    int stopped = 0, failed = 0;
    for (const RankReport& r : reports_) {
      ++(OnItsOwn(r) ? failed : stopped);
    }
    return absl::StrFormat(
        "overlaprun: job failed: %s; %d rank%s failed and %d %s stopped; the job ended %.2f s "
        "after",
        LostHostSentence(), failed, failed == 1 ? "" : "s", stopped,
        stopped == 1 ? "was" : "were", static_cast<double>(job_end_ms - lost_at_ms_) / 1000.0);
  }
  std::optional<RankReport> cause = Cause();
  if (!cause) {
    return "";
  }
  int stopped = 0, failed = 0;
  for (const RankReport& r : reports_) {
    if (r.rank == cause->rank && r.end_ms == cause->end_ms) {
      continue;
    }
    ++(OnItsOwn(r) ? failed : stopped);
  }
  return absl::StrFormat(
      "overlaprun: job failed: rank %d on host %s %s; after it %d rank%s failed and %d %s stopped; "
      "the job ended %.2f s after the first failure",
      cause->rank, cause->host, DescribeEnd(*cause), failed, failed == 1 ? "" : "s", stopped,
      stopped == 1 ? "was" : "were", static_cast<double>(job_end_ms - cause->end_ms) / 1000.0);
}

int FailureLog::ExitStatus(int mpirun_status) const {
  if (!lost_.empty()) {
    return std::max(1, mpirun_status);  // no rank's status says what happened
  }
  std::optional<RankReport> cause = Cause();
  if (cause) {
    return ExitStatusFor(*cause);
  }
  return mpirun_status;
}

}  // namespace overlap::launcher
