#include "launcher/reachability.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace overlap::launcher {
namespace {

std::vector<std::string> LocalAddresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return out;
  }
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) {
      continue;
    }
    char buf[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, buf,
                sizeof(buf));
    } else {
      continue;
    }
    out.emplace_back(buf);
  }
  freeifaddrs(list);
  return out;
}

// One `agent host true` in flight; its stderr goes to a temporary file for the error message.
struct Probe {
  std::string host;
  pid_t pid = -1;
  std::string stderr_path;
  int status = 0;
  bool done = false;
};

Probe StartProbe(const std::vector<std::string>& agent, const std::string& host) {
  Probe p;
  p.host = host;
  char path[] = "/tmp/overlaprun-probe-XXXXXX";
  int fd = mkstemp(path);
  p.stderr_path = path;
  std::vector<std::string> argv = agent;
  argv.insert(argv.end(), {host, "true"});
  p.pid = fork();
  if (p.pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, STDIN_FILENO);
    dup2(devnull, STDOUT_FILENO);
    if (fd >= 0) {
      dup2(fd, STDERR_FILENO);
    }
    setpgid(0, 0);  // so a timeout can kill the agent and whatever it started
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (std::string& a : argv) {
      args.push_back(a.data());
    }
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  if (fd >= 0) {
    close(fd);
  }
  return p;
}

std::string LastLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!absl::StripAsciiWhitespace(line).empty()) {
      last = line;
    }
  }
  return std::string(absl::StripAsciiWhitespace(last));
}

absl::Status ProbeError(const Probe& p, const std::vector<std::string>& agent, bool timed_out,
                        double timeout_s) {
  const std::string how = absl::StrJoin(agent, " ");
  if (timed_out) {
    return absl::UnavailableError(absl::StrCat("host ", p.host, " did not answer through '", how,
                                               "' within ", timeout_s, " s (--start-timeout)"));
  }
  std::string detail = LastLine(p.stderr_path);
  std::string status = WIFEXITED(p.status) && WEXITSTATUS(p.status) == 127 && detail.empty()
                           ? absl::StrCat("the agent '", agent[0], "' could not be run")
                       : WIFEXITED(p.status) ? absl::StrCat("exit status ", WEXITSTATUS(p.status))
                                             : absl::StrCat("signal ", WTERMSIG(p.status));
  return absl::UnavailableError(absl::StrCat("host ", p.host, " is not reachable through '", how,
                                             "': ", status, detail.empty() ? "" : ": ", detail));
}

}  // namespace

bool IsLocalHost(const std::string& host) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") {
    return true;
  }
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && host == name) {
    return true;
  }
  for (const std::string& addr : LocalAddresses()) {
    if (host == addr) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> AgentCommand(const LaunchOptions& options, double timeout_s) {
  std::string agent = options.rsh_agent;
  if (agent.empty()) {
    const char* env = getenv("OMPI_MCA_plm_rsh_agent");
    // Open MPI's value is a ':'-separated list of choices; the first one is tried first.
    if (env != nullptr) {
      agent = std::string(absl::StripAsciiWhitespace(
          absl::string_view(env).substr(0, absl::string_view(env).find(':'))));
    }
  }
  if (agent.empty()) {
    agent = "ssh";
  }
  std::vector<std::string> argv = absl::StrSplit(agent, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  const std::string base = argv[0].substr(argv[0].rfind('/') + 1);
  if (base == "ssh") {
    argv.insert(argv.begin() + 1,
                {"-o", "BatchMode=yes", "-o",
                 absl::StrCat("ConnectTimeout=", std::max(1, static_cast<int>(timeout_s)))});
  }
  return argv;
}

absl::Status CheckHostsReachable(const LaunchOptions& options) {
  const std::vector<std::string> agent = AgentCommand(options, options.start_timeout_s);
  std::vector<Probe> probes;
  for (const HostSlots& h : options.hosts) {
    if (!IsLocalHost(h.host)) {
      probes.push_back(StartProbe(agent, h.host));
    }
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(options.start_timeout_s);
  size_t remaining = probes.size();
  while (remaining > 0 && std::chrono::steady_clock::now() < deadline) {
    for (Probe& p : probes) {
      if (!p.done && p.pid > 0 && waitpid(p.pid, &p.status, WNOHANG) == p.pid) {
        p.done = true;
        --remaining;
      }
    }
    if (remaining > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  absl::Status result;
  for (Probe& p : probes) {
    const bool timed_out = !p.done;
    if (timed_out && p.pid > 0) {
      kill(-p.pid, SIGKILL);
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &p.status, 0);
    }
    const bool ok = !timed_out && WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0;
    if (!ok && result.ok()) {
      result = ProbeError(p, agent, timed_out, options.start_timeout_s);
      result.SetPayload(kUnreachableHostPayload, absl::Cord(p.host));
    }
    unlink(p.stderr_path.c_str());
  }
  return result;
}

}  // namespace overlap::launcher
