#include "launcher/mpirun_command.h"

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "launcher/parse_args.h"

namespace overlap::launcher {
namespace {

LaunchOptions Options(std::vector<std::string> args) {
  auto p = ParseArgs(args);
  REQUIRE(p.ok());
  return p->options;
}

LaunchContext Context(bool root = false) {
  LaunchContext c;
  c.environment = {{"HOME", "/root"},
                   {"PATH", "/usr/bin"},
                   {"OVERLAP_LOG_LEVEL", "trace"},
                   {"OVERLAP_NUM_CHANNELS", "3"},
                   {"XOVERLAP_NOT_OURS", "1"}};
  c.running_as_root = root;
  c.self_path = "/opt/bin/overlaprun";
  return c;
}

std::string Command(std::vector<std::string> args, bool root = false) {
  return absl::StrJoin(BuildMpirunCommand(Options(std::move(args)), Context(root)), " ");
}

TEST_CASE("a local job: oversubscribe allowed, no binding, wrapped ranks", "[command]") {
  CHECK(Command({"-np", "2", "./train", "--lr", "0.1"}) ==
        "mpirun -np 2 --bind-to none --map-by slot --oversubscribe "
        "-x OVERLAP_LOG_LEVEL -x OVERLAP_NUM_CHANNELS -x PATH "
        "/opt/bin/overlaprun --rank-wrapper -- ./train --lr 0.1");
}

TEST_CASE("the wrapper gets --peer-grace only when it is not the default", "[command]") {
  CHECK(absl::StrContains(Command({"-np", "2", "--peer-grace", "0.5", "./train"}),
                          "/opt/bin/overlaprun --rank-wrapper --peer-grace 0.5 -- ./train"));
  CHECK_FALSE(absl::StrContains(Command({"-np", "2", "--peer-grace", "2", "./train"}),
                                "--peer-grace"));
}

TEST_CASE("hosts, agent, interface, TCP only and root", "[command]") {
  CHECK(Command({"-np", "4", "-H", "a:2,b:2", "--rsh-agent", "/x/agent.sh", "--tcp-only",
                 "--network-interface", "10.77.0.0/24", "--no-rank-wrapper", "prog"},
                true) ==
        "mpirun --allow-run-as-root -np 4 -H a:2,b:2 --bind-to none --map-by slot "
        "--mca plm_rsh_agent /x/agent.sh --mca btl tcp,self "
        "--mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 "
        "-x OVERLAP_LOG_LEVEL -x OVERLAP_NUM_CHANNELS -x PATH prog");
}

TEST_CASE("--host-timeout becomes TCP keepalive on mpirun's daemon connections", "[command]") {
  // 10 s: idle 5 s, then 5 probes 1 s apart; 60 s: idle 30 s, probes 6 s apart.
  CHECK(Command({"-np", "2", "--host-timeout", "10", "--no-rank-wrapper", "p"}) ==
        "mpirun -np 2 --bind-to none --map-by slot --oversubscribe "
        "--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 1 "
        "--mca oob_tcp_keepalive_probes 5 "
        "-x OVERLAP_LOG_LEVEL -x OVERLAP_NUM_CHANNELS -x PATH p");
  CHECK(absl::StrContains(Command({"-np", "2", "--host-timeout", "60", "p"}),
                          "--mca oob_tcp_keepalive_time 30 --mca oob_tcp_keepalive_intvl 6 "));
  CHECK_FALSE(absl::StrContains(Command({"-np", "2", "p"}), "keepalive"));
}

TEST_CASE("runtime options override inherited OVERLAP_* values; -x overrides both", "[command]") {
  auto vars =
      ForwardedVariables(Options({"-np", "2", "--log-level", "info", "--fusion-threshold-mb", "1",
                                  "-x", "OVERLAP_NUM_CHANNELS=5", "-x", "HOME", "prog"}),
                         Context());
  CHECK(absl::StrJoin(vars, " ") ==
        "OVERLAP_FUSION_THRESHOLD=1048576 OVERLAP_LOG_LEVEL=info PATH "
        "OVERLAP_NUM_CHANNELS=5 HOME");
}

TEST_CASE("HOROVOD_* variables reach the ranks, as horovodrun passes them", "[command]") {
  LaunchContext context = Context();
  context.environment.emplace_back("HOROVOD_HIERARCHICAL_ALLREDUCE", "1");
  context.environment.emplace_back("XHOROVOD_NOT_OURS", "1");
  CHECK(absl::StrJoin(ForwardedVariables(Options({"-np", "2", "prog"}), context), " ") ==
        "OVERLAP_LOG_LEVEL OVERLAP_NUM_CHANNELS HOROVOD_HIERARCHICAL_ALLREDUCE PATH");
}

TEST_CASE("--oversubscribe and --mpi-args pass through; mpirun can be chosen", "[command]") {
  CHECK(Command({"-np", "3", "-H", "a:1", "--oversubscribe", "--mpirun", "/usr/bin/mpirun",
                 "--mpi-args", "--mca btl_tcp_links 2", "--no-rank-wrapper", "p"}) ==
        "/usr/bin/mpirun -np 3 -H a:1 --bind-to none --map-by slot --oversubscribe "
        "-x OVERLAP_LOG_LEVEL -x OVERLAP_NUM_CHANNELS -x PATH --mca btl_tcp_links 2 p");
}

TEST_CASE("the printed command quotes what the shell would split", "[command]") {
  CHECK(ShellQuoted({"mpirun", "-x", "A=b c", "it's", "plain/path-1.0"}) ==
        "mpirun -x 'A=b c' 'it'\\''s' plain/path-1.0");
}

}  // namespace
}  // namespace overlap::launcher
