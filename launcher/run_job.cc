#include "launcher/run_job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "launcher/failure_log.h"
#include "launcher/hosts.h"
#include "launcher/rank_report.h"

namespace overlap::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// Rank r's host as --map-by slot places it, for every rank the host list covers.
std::vector<std::string> RankHosts(const LaunchOptions& options) {
  std::vector<std::string> hosts;
  for (int rank = 0; rank < options.num_ranks; ++rank) {
    hosts.push_back(HostOfRank(options.hosts, rank));
  }
  return hosts;
}

// mpirun gets this long after SIGTERM before SIGKILL.
constexpr std::chrono::seconds kTermToKill{3};
// After mpirun exits, its stderr is read for at most this long: daemons on a host that lost its
// network may hold the pipe open forever.
constexpr std::chrono::seconds kDrain{1};

volatile sig_atomic_t g_mpirun_pid = 0;
volatile sig_atomic_t g_received_signal = 0;

void ForwardToMpirun(int sig) {
  g_received_signal = sig;
  if (g_mpirun_pid > 0) {
    kill(g_mpirun_pid, sig);
  }
}

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void Say(const std::string& line) {
  std::string text = line + "\n";
  WriteAll(STDERR_FILENO, text.data(), text.size());
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Clock::time_point After(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

pid_t StartMpirun(const std::vector<std::string>& argv, int stderr_fd) {
  pid_t pid = fork();
  if (pid != 0) {
    return pid;
  }
  dup2(stderr_fd, STDERR_FILENO);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "overlaprun: cannot run '%s': %s\n", args[0], strerror(errno));
  _exit(127);
}

// Watches one mpirun: passes its stderr through line by line minus the wrappers' start and end
// lines, announces the first failure, and enforces the start timeout and the kill grace.
class JobWatcher {
 public:
  JobWatcher(const LaunchOptions& options, pid_t mpirun, int stderr_fd)
      : options_(options), mpirun_(mpirun), fd_(stderr_fd), log_(RankHosts(options)) {
    // Without the wrapper no rank says it started, so there is nothing to time.
    if (options_.wrap_ranks) {
      start_deadline_ = After(options_.start_timeout_s);
    }
  }

  // Runs until mpirun has exited and its stderr is drained; returns overlaprun's exit status.
  int Run() {
    while (!mpirun_done_ || (pipe_open_ && Clock::now() < drain_until_)) {
      ReadSome();
      CheckMpirun();
      CheckDeadlines();
    }
    WriteAll(STDERR_FILENO, buffer_.data(), buffer_.size());
    const int status = Finish();
    if (!options_.failure_report.empty()) {
      WriteFailureReport(status);
    }
    return status;
  }

 private:
  void ReadSome() {
    if (!pipe_open_) {
      usleep(100 * 1000);
      return;
    }
    pollfd pfd{fd_, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) {
      return;
    }
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n > 0) {
      buffer_.append(buf, static_cast<size_t>(n));
      size_t newline;
      while ((newline = buffer_.find('\n')) != std::string::npos) {
        HandleLine(buffer_.substr(0, newline + 1));
        buffer_.erase(0, newline + 1);
      }
    } else if (n == 0 || errno != EINTR) {
      pipe_open_ = false;
    }
  }

  void HandleLine(const std::string& line) {
    if (std::optional<int> rank = ParseRankStart(line)) {
      started_.insert(*rank);
      return;
    }
    std::optional<RankReport> report = ParseRankReport(line);
    if (!report) {
      WriteAll(STDERR_FILENO, line.data(), line.size());
      if (std::optional<std::string> host = ParseLostDaemonHost(line)) {
        LostHost(*host, -1);
      } else if (std::optional<UnansweredPeer> peer = ParseUnansweredPeer(line)) {
        LostHost(peer->host, peer->reporter);
      } else if (std::optional<ExitedPeer> exited = ParseExitedPeer(line)) {
        log_.AddExitedPeer(exited->peer, exited->reporter);
      }
      return;
    }
    if (!log_.Add(*report)) {
      return;
    }
    Say(absl::StrCat("overlaprun: rank ", report->rank, " on host ", report->host, " ",
                     DescribeEnd(*report), "; stopping the job"));
    first_failure_ = absl::StrCat("rank ", report->rank, " failed");
    terminate_at_ = After(options_.kill_grace_s);
  }

  // mpirun (`reporter` -1) or a rank's control connection lost contact with `host`. The job then
  // ends by itself (mpirun aborts it, or the rank fails and its peers follow), but nothing reaches
  // the host's ranks, so the kill grace applies as after a rank's failure. Which host is to blame
  // is decided when the job has ended (FailureLog::AddLostHost); a worker that lost rank 0 may be
  // the silent one, so its report names both.
  void LostHost(const std::string& host, int reporter) {
    if (!log_.AddLostHost(host, reporter, NowMs())) {
      return;
    }
    const std::string reporter_host = reporter > 0 ? log_.HostOf(reporter) : "";
    if (!reporter_host.empty() && reporter_host != host) {
      Say(absl::StrCat("overlaprun: rank ", reporter, " on host ", reporter_host,
                       " lost contact with host ", log_.HostAndRanks(host),
                       ": one of the two hosts or the network between them is down; stopping "
                       "the job"));
    } else {
      Say(absl::StrCat("overlaprun: ", reporter < 0 ? "mpirun" : absl::StrCat("rank ", reporter),
                       " lost contact with host ", log_.HostAndRanks(host),
                       ": the host or its network is down; stopping the job"));
    }
    if (!terminate_at_) {
      first_failure_ = absl::StrCat("it lost contact with ", host);
      terminate_at_ = After(options_.kill_grace_s);
    }
  }

  void CheckMpirun() {
    if (mpirun_done_ || waitpid(mpirun_, &mpirun_status_, WNOHANG) != mpirun_) {
      return;
    }
    mpirun_done_ = true;
    end_ms_ = NowMs();
    drain_until_ = Clock::now() + kDrain;
    g_mpirun_pid = 0;
  }

  void CheckDeadlines() {
    if (mpirun_done_) {
      return;
    }
    const Clock::time_point now = Clock::now();
    if (start_deadline_ && now >= *start_deadline_) {
      start_deadline_.reset();
      if (static_cast<int>(started_.size()) < options_.num_ranks && log_.empty()) {
        failure_ = absl::StrFormat("%s did not start within %g s (--start-timeout)",
                                   RankList([this](int r) { return started_.count(r) > 0; }),
                                   options_.start_timeout_s);
        Say(absl::StrCat("overlaprun: ", failure_, "; terminating mpirun"));
        Terminate();
      }
    }
    if (terminate_at_ && now >= *terminate_at_) {
      terminate_at_.reset();
      Say(
          absl::StrFormat("overlaprun: mpirun has not stopped the job %g s after %s "
                          "(--kill-grace); terminating it",
                          options_.kill_grace_s, first_failure_));
      silent_ = RankList([this](int r) { return log_.Reported(r); });
      Say(absl::StrCat("overlaprun: no end was reported by ", silent_,
                       ": still running, or on a host that is unreachable"));
      Terminate();
    }
    if (kill_at_ && now >= *kill_at_) {
      kill_at_.reset();
      kill(mpirun_, SIGKILL);
    }
  }

  void Terminate() {
    kill(mpirun_, SIGTERM);
    kill_at_ = Clock::now() + kTermToKill;
  }

  // "rank 2 (h3)" or "ranks 1 (h2), 3": the ranks for which `done` is false, with the host
  // --map-by slot places them on when the host list says.
  template <typename Done>
  std::string RankList(Done done) const {
    std::vector<std::string> ranks;
    for (int rank = 0; rank < options_.num_ranks; ++rank) {
      if (done(rank)) {
        continue;
      }
      const std::string host = HostOfRank(options_.hosts, rank);
      ranks.push_back(host.empty() ? absl::StrCat(rank) : absl::StrCat(rank, " (", host, ")"));
    }
    return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
  }

  int Finish() const {
    const int status =
        WIFEXITED(mpirun_status_) ? WEXITSTATUS(mpirun_status_) : 128 + WTERMSIG(mpirun_status_);
    const std::optional<RankReport> cause = log_.Cause();
    // A job the user interrupted ends with ranks that mpirun stopped; none failed on its own.
    if (const int sig = g_received_signal; sig != 0 && (!cause || cause->stopped_by_launcher)) {
      Say(absl::StrCat("overlaprun: job stopped: overlaprun received ", SignalName(sig),
                       " and passed it to mpirun"));
      return 128 + sig;
    }
    if (cause || log_.lost_host()) {
      Say(absl::StrCat(log_.Summary(end_ms_),
                       silent_.empty() ? "" : absl::StrCat("; no end was reported by ", silent_)));
      return log_.ExitStatus(status);
    }
    if (!failure_.empty()) {
      Say(absl::StrCat("overlaprun: job failed: ", failure_));
      return 1;
    }
    if (status != 0) {
      Say(absl::StrCat("overlaprun: mpirun failed with status ", status,
                       " before any rank reported a failure (its messages are above)"));
    }
    return status;
  }

  // For the elastic driver (python/overlap/elastic_driver.py): how the job ended, as one JSON
  // object, e.g. {"status": 137, "cause_rank": 1, "cause_how": "signaled", "cause_code": 9,
  // "blamed_host": "h2", "lost_host": false, "interrupted": false}.
  void WriteFailureReport(int status) const {
    const std::optional<RankReport> cause = log_.Cause();
    const char* how = "none";
    if (cause) {
      how = cause->how == RankReport::How::kExited     ? "exited"
            : cause->how == RankReport::How::kSignaled ? "signaled"
                                                       : "exec_failed";
    }
    const std::string json = absl::StrFormat(
        "{\"status\": %d, \"cause_rank\": %d, \"cause_how\": \"%s\", \"cause_code\": %d, "
        "\"blamed_host\": \"%s\", \"lost_host\": %s, \"interrupted\": %s, "
        "\"start_timeout\": %s}\n",
        status, cause ? cause->rank : -1, how, cause ? cause->code : 0,
        absl::CEscape(log_.BlamedHost()), log_.lost_host() ? "true" : "false",
        g_received_signal != 0 ? "true" : "false", failure_.empty() ? "false" : "true");
    FILE* f = std::fopen(options_.failure_report.c_str(), "w");
    if (f == nullptr) {
      Say(absl::StrCat("overlaprun: cannot write ", options_.failure_report, ": ",
                       strerror(errno)));
      return;
    }
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }

  const LaunchOptions& options_;
  const pid_t mpirun_;
  const int fd_;
  std::string buffer_;  // an incomplete last line of mpirun's stderr
  FailureLog log_;
  std::set<int> started_;
  std::string failure_;        // why overlaprun stopped a job no rank reported failing
  std::string silent_;         // ranks that had not reported when mpirun was terminated
  std::string first_failure_;  // "rank 1 failed" or "it lost contact with h3", for messages
  std::optional<Clock::time_point> start_deadline_, terminate_at_, kill_at_;
  Clock::time_point drain_until_;
  bool mpirun_done_ = false, pipe_open_ = true;
  int mpirun_status_ = 0;
  int64_t end_ms_ = 0;
};

}  // namespace

int RunJob(const std::vector<std::string>& mpirun_argv, const LaunchOptions& options) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    Say(absl::StrCat("overlaprun: cannot create a pipe: ", strerror(errno)));
    return 1;
  }
  const pid_t pid = StartMpirun(mpirun_argv, pipe_fds[1]);
  close(pipe_fds[1]);
  if (pid < 0) {
    Say(absl::StrCat("overlaprun: cannot start mpirun: ", strerror(errno)));
    close(pipe_fds[0]);
    return 1;
  }
  g_mpirun_pid = pid;
  struct sigaction sa {};
  sa.sa_handler = ForwardToMpirun;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    sigaction(sig, &sa, nullptr);
  }
  const int status = JobWatcher(options, pid, pipe_fds[0]).Run();
  close(pipe_fds[0]);
  return status;
}

}  // namespace overlap::launcher
