#include "launcher/rank_wrapper.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "launcher/rank_report.h"

namespace overlap::launcher {
namespace {

volatile sig_atomic_t g_child_pid = 0;
volatile sig_atomic_t g_stop_requested = 0;
volatile sig_atomic_t g_pending_signal = 0;

constexpr int kForwardedSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

bool IsStopSignal(int sig) {
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

void ForwardSignal(int sig) {
  if (IsStopSignal(sig)) {
    g_stop_requested = 1;
  }
  if (g_child_pid > 0) {
    kill(g_child_pid, sig);
  } else {
    g_pending_signal = sig;  // arrived before fork returned; forwarded right after
  }
}

void InstallForwarding() {
  struct sigaction sa {};
  sa.sa_handler = ForwardSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : kForwardedSignals) {
    sigaction(sig, &sa, nullptr);
  }
}

int RankFromEnvironment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK"}) {
    const char* value = getenv(name);
    int rank = 0;
    if (value != nullptr && absl::SimpleAtoi(value, &rank)) {
      return rank;
    }
  }
  return -1;
}

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) {
    return "unknown-host";
  }
  return host;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// In the child: undo the wrapper's signal handling, die with the wrapper, then exec. On failure the
// errno goes through `error_fd` (close-on-exec, so a successful exec closes it with nothing sent).
[[noreturn]] void ExecProgram(const std::vector<std::string>& program, int error_fd) {
  for (int sig : kForwardedSignals) {
    signal(sig, SIG_DFL);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::vector<char*> argv;
  argv.reserve(program.size() + 1);
  for (const std::string& arg : program) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const int err = errno;
  (void)!write(error_fd, &err, sizeof(err));
  _exit(127);
}

void Report(RankReport report) {
  report.rank = RankFromEnvironment();
  report.host = HostName();
  report.end_ms = NowMs();
  // Only a program killed by a signal after mpirun asked us to stop it was stopped; one that
  // exited with a status did so itself, even if the request reached us before we saw the exit
  // (mpirun may stop the cause of a failure a moment after a faster peer reported).
  report.stopped_by_launcher = g_stop_requested != 0 && report.how == RankReport::How::kSignaled &&
                               (IsStopSignal(report.code) || report.code == SIGKILL);
  const std::string line = FormatRankReport(report);
  // One write so the line reaches mpirun's forwarding in one piece.
  (void)!write(STDERR_FILENO, line.data(), line.size());
}

// Waits up to `seconds`, returning early when a stop signal arrives (mpirun stopping the job
// because it is over); signals interrupt the sleep, so that is seen at once.
void Linger(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (g_stop_requested == 0 && std::chrono::steady_clock::now() < until) {
    usleep(20 * 1000);
  }
}

}  // namespace

int RunRankWrapper(const std::vector<std::string>& program, double peer_grace_s) {
  InstallForwarding();
  // If the daemon that started us dies, we hear about it and take the program down with us.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  int error_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0) {
    return 127;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    return 127;
  }
  if (pid == 0) {
    close(error_pipe[0]);
    ExecProgram(program, error_pipe[1]);
  }
  g_child_pid = pid;
  if (g_pending_signal != 0) {
    kill(pid, g_pending_signal);
  }
  close(error_pipe[1]);

  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(error_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  close(error_pipe[0]);
  if (n == 0) {
    // The exec succeeded (it closed the pipe without a word): the rank is running.
    const std::string line = FormatRankStart(RankFromEnvironment());
    (void)!write(STDERR_FILENO, line.data(), line.size());
  }

  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  RankReport report;
  report.pid = pid;
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    report.how = RankReport::How::kExecFailed;
    report.code = exec_errno;
  } else if (WIFSIGNALED(status)) {
    report.how = RankReport::How::kSignaled;
    report.code = WTERMSIG(status);
  } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    report.how = RankReport::How::kExited;
    report.code = WEXITSTATUS(status);
  } else {
    return 0;
  }
  Report(report);
  Linger(peer_grace_s);
  return ExitStatusFor(report);
}

}  // namespace overlap::launcher
