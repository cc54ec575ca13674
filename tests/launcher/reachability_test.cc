#include "launcher/reachability.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>

#include "launcher/parse_args.h"
#include "tests/launcher/test_util.h"

namespace overlap::launcher {
namespace {

using testing::Options;
using testing::TempDir;
using testing::WriteScript;

TEST_CASE("this machine's names are local and need no agent", "[reachability]") {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  CHECK(IsLocalHost("localhost"));
  CHECK(IsLocalHost("127.0.0.1"));
  CHECK(IsLocalHost(name));
  CHECK_FALSE(IsLocalHost("no-such-host.invalid"));
}

TEST_CASE("ssh agents get batch mode and a connect timeout", "[reachability]") {
  CHECK(AgentCommand(Options({"-np", "1", "--rsh-agent", "/usr/bin/ssh -p 2222", "p"}), 7.9) ==
        std::vector<std::string>{"/usr/bin/ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=7",
                                 "-p", "2222"});
  CHECK(AgentCommand(Options({"-np", "1", "--rsh-agent", "/x/rsh.sh", "p"}), 5) ==
        std::vector<std::string>{"/x/rsh.sh"});
}

TEST_CASE("hosts are probed through the agent; failures name host, agent and cause",
          "[reachability]") {
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

TEST_CASE("a host that never answers fails at the start timeout, not later", "[reachability]") {
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

}  // namespace
}  // namespace overlap::launcher
