#include "launcher/preflight.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>

#include "launcher/parse_args.h"

namespace overlap::launcher {
namespace {

std::string TempDir() { return getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp"; }

std::string WriteScript(const std::string& name, const std::string& body, mode_t mode = 0755) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  chmod(path.c_str(), mode);
  return path;
}

LaunchOptions Options(std::vector<std::string> args) {
  auto p = ParseArgs(args);
  REQUIRE(p.ok());
  return p->options;
}

TEST_CASE("programs are found in PATH or by path, and must be executable", "[preflight]") {
  auto sh = ResolveProgram("sh", "/nonexistent:/bin:/usr/bin");
  REQUIRE(sh.ok());
  CHECK(*sh == "/bin/sh");
  CHECK(ResolveProgram("no-such-program-xyz", "/bin").status().message() ==
        "program 'no-such-program-xyz' is not found in PATH");
  CHECK(ResolveProgram("/no/such/prog", "").status().message() ==
        "program '/no/such/prog' does not exist");
  const std::string plain = WriteScript("not_executable.sh", "true", 0644);
  auto denied = ResolveProgram(plain, "");
  CHECK(denied.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(denied.status().message() == "program '" + plain + "' is not an executable file");
  CHECK(ResolveProgram("/tmp", "").status().message() ==
        "program '/tmp' is not an executable file");
}

TEST_CASE("this machine's names are local and need no agent", "[preflight]") {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  CHECK(IsLocalHost("localhost"));
  CHECK(IsLocalHost("127.0.0.1"));
  CHECK(IsLocalHost(name));
  CHECK_FALSE(IsLocalHost("no-such-host.invalid"));
}

TEST_CASE("ssh agents get batch mode and a connect timeout", "[preflight]") {
  CHECK(AgentCommand(Options({"-np", "1", "--rsh-agent", "/usr/bin/ssh -p 2222", "p"}), 7.9) ==
        std::vector<std::string>{"/usr/bin/ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=7",
                                 "-p", "2222"});
  CHECK(AgentCommand(Options({"-np", "1", "--rsh-agent", "/x/rsh.sh", "p"}), 5) ==
        std::vector<std::string>{"/x/rsh.sh"});
}

TEST_CASE("hosts are probed through the agent; failures name host, agent and cause",
          "[preflight]") {
  const std::string ok = WriteScript("agent_ok.sh", "exit 0");
  CHECK(CheckHostsReachable(Options({"-np", "2", "-H", "n1,n2", "--rsh-agent", ok, "p"})).ok());

  const std::string refuse = WriteScript(
      "agent_refuse.sh",
      "[ \"$1\" = n2 ] || exit 0\necho 'ssh: connect to host n2: No route' >&2\nexit 255");
  absl::Status s =
      CheckHostsReachable(Options({"-np", "2", "-H", "n1,n2", "--rsh-agent", refuse, "p"}));
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK(s.message() == "host n2 is not reachable through '" + refuse +
                           "': exit status 255: ssh: connect to host n2: No route");

  s = CheckHostsReachable(Options({"-np", "1", "-H", "n1", "--rsh-agent", "/no/such/agent", "p"}));
  CHECK(s.message() ==
        "host n1 is not reachable through '/no/such/agent': the agent "
        "'/no/such/agent' could not be run");
}

TEST_CASE("a host that never answers fails at the start timeout, not later", "[preflight]") {
  const std::string hang = WriteScript("agent_hang.sh", "exec sleep 30");
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = CheckHostsReachable(
      Options({"-np", "1", "-H", "n1", "--rsh-agent", hang, "--start-timeout", "0.5", "p"}));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(s.message() ==
        "host n1 did not answer through '" + hang + "' within 0.5 s (--start-timeout)");
  CHECK(took < 2.0);
}

TEST_CASE("the timeline's directory must exist", "[preflight]") {
  absl::Status s = Preflight(Options({"-np", "1", "--timeline", "/no/such/dir/t.json", "sh"}));
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(s.message() == "--timeline /no/such/dir/t.json: directory /no/such/dir/ does not exist");
  CHECK(Preflight(Options({"-np", "1", "--timeline", TempDir() + "/t.json", "sh"})).ok());
}

}  // namespace
}  // namespace overlap::launcher
