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

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "launcher/failure_log.h"
#include "launcher/hosts.h"
#include "launcher/rank_report.h"

namespace overlap::launcher {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_mpirun_pid = 0;

void ForwardToMpirun(int sig) {
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

pid_t StartMpirun(const std::vector<std::string>& argv, int stderr_fd) {
  pid_t pid = fork();
  if (pid != 0) {
    return pid;
  }
  dup2(stderr_fd, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "overlaprun: cannot run '%s': %s\n", args[0], strerror(errno));
  _exit(127);
}

// Splits mpirun's stderr into lines, passing ordinary ones on and handing reports to the log.
class StderrFilter {
 public:
  explicit StderrFilter(FailureLog& log) : log_(log) {}

  // Returns a report that is a new failure to announce, if the data completed one.
  std::optional<RankReport> Feed(const char* data, size_t size) {
    buffer_.append(data, size);
    std::optional<RankReport> announce;
    size_t newline;
    while ((newline = buffer_.find('\n')) != std::string::npos) {
      std::string line = buffer_.substr(0, newline + 1);
      buffer_.erase(0, newline + 1);
      if (std::optional<RankReport> r = ParseRankReport(line)) {
        if (log_.Add(*r) && !announce) {
          announce = r;
        }
      } else {
        WriteAll(STDERR_FILENO, line.data(), line.size());
      }
    }
    return announce;
  }

  void Flush() {
    WriteAll(STDERR_FILENO, buffer_.data(), buffer_.size());
    buffer_.clear();
  }

 private:
  FailureLog& log_;
  std::string buffer_;
};

// Ranks whose wrapper never reported while mpirun hung are the likely culprits: a host that lost
// its network can neither report nor be stopped.
void SaySilentRanks(const FailureLog& log, const LaunchOptions& options) {
  std::vector<std::string> silent;
  for (int rank = 0; rank < options.num_ranks; ++rank) {
    if (log.Reported(rank)) {
      continue;
    }
    const std::string host = HostOfRank(options.hosts, rank);
    silent.push_back(host.empty() ? absl::StrCat(rank) : absl::StrCat(rank, " (", host, ")"));
  }
  if (silent.empty()) {
    return;
  }
  Say(absl::StrCat("overlaprun: no end was reported by rank", silent.size() == 1 ? " " : "s ",
                   absl::StrJoin(silent, ", "),
                   ": still running, or on a host that is unreachable"));
}

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
    return 1;
  }
  g_mpirun_pid = pid;
  struct sigaction sa {};
  sa.sa_handler = ForwardToMpirun;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    sigaction(sig, &sa, nullptr);
  }

  FailureLog log;
  StderrFilter filter(log);
  std::optional<Clock::time_point> terminate_at, kill_at, drain_until;
  std::optional<RankReport> announced;
  int mpirun_status = 0;
  bool mpirun_done = false, pipe_open = true;
  int64_t end_ms = 0;

  // Runs until mpirun has exited and its stderr is drained. Daemons on a host that lost its network
  // may keep the pipe open forever, so draining stops one second after mpirun exits.
  while (!mpirun_done || (pipe_open && Clock::now() < *drain_until)) {
    if (pipe_open) {
      pollfd pfd{pipe_fds[0], POLLIN, 0};
      if (poll(&pfd, 1, 100) > 0) {
        char buf[4096];
        ssize_t n = read(pipe_fds[0], buf, sizeof(buf));
        if (n > 0) {
          if (std::optional<RankReport> r = filter.Feed(buf, static_cast<size_t>(n))) {
            announced = r;
            Say(absl::StrCat("overlaprun: rank ", r->rank, " on host ", r->host, " ",
                             DescribeEnd(*r), "; stopping the job"));
            terminate_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(options.kill_grace_s));
          }
        } else if (n == 0 || errno != EINTR) {
          pipe_open = false;
        }
      }
    } else {
      usleep(100 * 1000);
    }
    if (!mpirun_done) {
      pid_t w = waitpid(pid, &mpirun_status, WNOHANG);
      if (w == pid) {
        mpirun_done = true;
        end_ms = NowMs();
        drain_until = Clock::now() + std::chrono::seconds(1);
        g_mpirun_pid = 0;
      }
    }
    if (!mpirun_done && terminate_at && Clock::now() >= *terminate_at) {
      Say(
          absl::StrFormat("overlaprun: mpirun has not stopped the job %.0f s after rank %d failed "
                          "(--kill-grace); terminating it",
                          options.kill_grace_s, announced->rank));
      SaySilentRanks(log, options);
      kill(pid, SIGTERM);
      terminate_at.reset();
      kill_at = Clock::now() + std::chrono::seconds(3);
    }
    if (!mpirun_done && kill_at && Clock::now() >= *kill_at) {
      kill(pid, SIGKILL);
      kill_at.reset();
    }
  }
  filter.Flush();
  close(pipe_fds[0]);

  const int status =
      WIFEXITED(mpirun_status) ? WEXITSTATUS(mpirun_status) : 128 + WTERMSIG(mpirun_status);
  if (!log.empty()) {
    Say(log.Summary(end_ms));
    return log.ExitStatus(status);
  }
  if (status != 0) {
    Say(absl::StrCat("overlaprun: mpirun failed with status ", status,
                     " before any rank reported a failure (its messages are above)"));
  }
  return status;
}

}  // namespace overlap::launcher
