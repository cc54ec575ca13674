#include "launcher/rank_report.h"

#include <catch2/catch.hpp>
#include <csignal>

#include "launcher/failure_log.h"

namespace overlap::launcher {
namespace {

RankReport Report(int rank, RankReport::How how, int code, int64_t end_ms, bool stopped = false) {
  RankReport r;
  r.rank = rank;
  r.host = "h" + std::to_string(rank + 1);
  r.pid = 100 + rank;
  r.how = how;
  r.code = code;
  r.end_ms = end_ms;
  r.stopped_by_launcher = stopped;
  return r;
}

TEST_CASE("a report survives formatting and parsing, even behind a prefix", "[report]") {
  RankReport r = Report(3, RankReport::How::kSignaled, SIGKILL, 1700000000123, true);
  const std::string line = FormatRankReport(r);
  CHECK(line.back() == '\n');
  auto parsed = ParseRankReport("[1,3]<stderr>:" + line);
  REQUIRE(parsed.has_value());
  CHECK(parsed->rank == 3);
  CHECK(parsed->host == "h4");
  CHECK(parsed->pid == 103);
  CHECK(parsed->how == RankReport::How::kSignaled);
  CHECK(parsed->code == SIGKILL);
  CHECK(parsed->end_ms == 1700000000123);
  CHECK(parsed->stopped_by_launcher);
}

TEST_CASE("start lines carry the rank", "[report]") {
  CHECK(FormatRankStart(7) == std::string(kRankStartMarker) + " rank=7\n");
  CHECK(ParseRankStart("[1,7]<stderr>:" + FormatRankStart(7)) == 7);
  CHECK_FALSE(ParseRankStart("rank=7").has_value());
  CHECK_FALSE(ParseRankStart(std::string(kRankStartMarker) + " rank=x").has_value());
  CHECK_FALSE(ParseRankReport(FormatRankStart(7)).has_value());
}

TEST_CASE("lines without the marker or with broken fields are not reports", "[report]") {
  CHECK_FALSE(ParseRankReport("rank=1 host=a how=exit code=1").has_value());
  CHECK_FALSE(ParseRankReport(std::string(kRankReportMarker) + " rank=x host=a pid=1 how=exit "
                                                               "code=1 end_ms=1 stopped=0")
                  .has_value());
  CHECK_FALSE(ParseRankReport(std::string(kRankReportMarker) + " rank=1 host=a pid=1 how=melt "
                                                               "code=1 end_ms=1 stopped=0")
                  .has_value());
}

TEST_CASE("descriptions and exit statuses follow the shell's conventions", "[report]") {
  CHECK(DescribeEnd(Report(0, RankReport::How::kExited, 3, 0)) == "exited with status 3");
  CHECK(ExitStatusFor(Report(0, RankReport::How::kExited, 3, 0)) == 3);
  CHECK(DescribeEnd(Report(0, RankReport::How::kSignaled, SIGKILL, 0)) ==
        "was killed by signal 9 (SIGKILL)");
  CHECK(ExitStatusFor(Report(0, RankReport::How::kSignaled, SIGKILL, 0)) == 137);
  CHECK(DescribeEnd(Report(0, RankReport::How::kExecFailed, ENOENT, 0)) ==
        "could not start its program: No such file or directory");
  CHECK(ExitStatusFor(Report(0, RankReport::How::kExecFailed, ENOENT, 0)) == 127);
}

TEST_CASE("the failure log blames the earliest rank that failed on its own", "[report]") {
  FailureLog log;
  CHECK(log.empty());
  CHECK_FALSE(log.Reported(2));
  // Reports arrive out of order: rank 2 died first, rank 0 noticed and exited, rank 1 was stopped.
  CHECK(log.Add(Report(0, RankReport::How::kExited, 1, 5000)));  // first own failure: announce
  CHECK_FALSE(log.Add(Report(2, RankReport::How::kSignaled, SIGKILL, 4000)));
  CHECK_FALSE(log.Add(Report(1, RankReport::How::kSignaled, SIGTERM, 5100, true)));
  REQUIRE(log.Cause().has_value());
  CHECK(log.Reported(2));
  CHECK_FALSE(log.Reported(3));
  CHECK(log.Cause()->rank == 2);
  CHECK(log.BlamedHost() == "h3");  // the rank's own host name, without a host list
  CHECK(log.ExitStatus(1) == 137);
  CHECK(log.Summary(6500) ==
        "overlaprun: job failed: rank 2 on host h3 was killed by signal 9 (SIGKILL); after it 1 "
        "rank failed and 1 was stopped; the job ended 2.50 s after the first failure");
}

TEST_CASE("mpirun's report of a lost daemon names the host, which is then the cause", "[report]") {
  CHECK(ParseLostDaemonHost("  Remote daemon: [[29664,0],3] on node h3") == "h3");
  CHECK(ParseLostDaemonHost("  Remote daemon: [[29664,0],3] on node h3\n") == "h3");
  CHECK_FALSE(ParseLostDaemonHost("  HNP daemon   : [[29664,0],0] on node vm").has_value());
  CHECK_FALSE(ParseLostDaemonHost("rank 1: Remote daemon: is fine").has_value());
  CHECK_FALSE(ParseLostDaemonHost("Remote daemon: x on node ").has_value());
  // mpirun aborts the job: ranks on the other hosts are stopped or fail; the lost host is blamed.
  FailureLog log({"h1", "h2", "h3", "h4"});
  CHECK(log.AddLostHost("h4", 0, 20000));
  CHECK(log.lost_host());
  CHECK_FALSE(log.AddLostHost("h3", -1, 20001));
  CHECK_FALSE(log.Add(Report(3, RankReport::How::kSignaled, SIGTERM, 20100)));
  CHECK_FALSE(log.Add(Report(0, RankReport::How::kSignaled, SIGTERM, 20110, true)));
  CHECK(log.Summary(21500) ==
        "overlaprun: job failed: mpirun lost contact with host h3 (rank 2): the host or its "
        "network is down; 1 rank failed and 1 was stopped; the job ended 1.50 s after");
  CHECK(log.BlamedHost() == "h3");  // what the elastic driver blacklists
  // Not rank 3's 143: mpirun's status, and never 0.
  CHECK(log.ExitStatus(1) == 1);
  CHECK(log.ExitStatus(0) == 1);
}

TEST_CASE("a rank's silent control connection names the peer's host, which is then the cause",
          "[report]") {
  const std::optional<UnansweredPeer> peer = ParseUnansweredPeer(
      "[2026-11-23 07:40:01.123] [error] overlap: rank 0: lost the control connection to rank 2 "
      "(host h3): no answer for 5s: the host or its network is down (Connection timed out)\n");
  REQUIRE(peer.has_value());
  CHECK(peer->reporter == 0);
  CHECK(peer->host == "h3");
  // A peer that exited is not a lost host: its own report says why.
  CHECK_FALSE(ParseUnansweredPeer("overlap: rank 0: lost the control connection to rank 2 (host "
                                  "h3): the process exited or shut down early")
                  .has_value());
  CHECK_FALSE(ParseUnansweredPeer("lost the control connection to rank 2 (host h3): no answer for")
                  .has_value());
  CHECK_FALSE(ParseUnansweredPeer("rank x: lost the control connection to rank 2 (host a b): no "
                                  "answer for 5s")
                  .has_value());
  FailureLog log({"h1", "h2", "h3", "h4"});
  CHECK(log.AddLostHost("h3", 0, 20000));
  CHECK_FALSE(log.Add(Report(0, RankReport::How::kExited, 1, 20050)));
  CHECK(log.BlamedHost() == "h3");
  CHECK(log.Summary(21000) ==
        "overlaprun: job failed: rank 0 lost contact with host h3 (rank 2): the host or its "
        "network is down; 1 rank failed and 0 were stopped; the job ended 1.00 s after");
  // Without the hosts of the ranks, the host alone.
  FailureLog unmapped;
  CHECK(unmapped.AddLostHost("h3", 0, 20000));
  CHECK_THAT(unmapped.Summary(21000),
             Catch::StartsWith("overlaprun: job failed: rank 0 lost contact with host h3: "));
}

TEST_CASE("a worker that lost rank 0 is blamed when a third host still heard from rank 0",
          "[report]") {
  // Seen in CI (network_faults_test, 10% loss on h3): rank 2 on h3 timed out on rank 0 first and
  // exited; rank 0 saw the reset, failed, and ranks 1 and 3 (h2, h4) saw rank 0 exit.
  CHECK(ParseExitedPeer("overlap: rank 3: lost the control connection to rank 0 (host h1): the "
                        "process exited or shut down early")
            ->reporter == 3);
  auto lossy_h3 = [](bool third_host_saw_exit) {
    FailureLog log({"h1", "h2", "h3", "h4"});
    CHECK(log.AddLostHost("h1", 2, 10000));
    log.Add(Report(2, RankReport::How::kExited, 1, 10010));
    log.Add(Report(0, RankReport::How::kExited, 1, 10400));
    if (third_host_saw_exit) {
      log.AddExitedPeer(0, 1);
      log.AddExitedPeer(0, 3);
    }
    log.Add(Report(1, RankReport::How::kExited, 1, 10450));
    log.Add(Report(3, RankReport::How::kExited, 1, 10460));
    return log.Summary(12350);
  };
  CHECK(lossy_h3(true) ==
        "overlaprun: job failed: rank 2 on host h3 stopped hearing from host h1 (rank 0), which "
        "ranks on other hosts still heard from: host h3 (rank 2) or its network is down; 4 ranks "
        "failed and 0 were stopped; the job ended 2.35 s after");
  // No one else heard from h1: h1 is named, as the report says.
  CHECK_THAT(lossy_h3(false), Catch::StartsWith("overlaprun: job failed: rank 2 lost contact "
                                                "with host h1 (rank 0): the host or its network"));
  // Only the reporter's own host saw rank 0 go: no evidence from a third host.
  FailureLog same_host({"h1", "h3", "h3"});
  CHECK(same_host.AddLostHost("h1", 2, 10000));
  same_host.AddExitedPeer(0, 1);
  CHECK_THAT(same_host.Summary(11000),
             Catch::StartsWith("overlaprun: job failed: rank 2 lost contact with host h1"));
  // mpirun's report outranks the ranks'.
  FailureLog daemon({"h1", "h2", "h3", "h4"});
  CHECK(daemon.AddLostHost("h1", 2, 10000));
  daemon.AddExitedPeer(0, 1);
  CHECK_FALSE(daemon.AddLostHost("h3", -1, 10500));
  CHECK_THAT(daemon.Summary(11000),
             Catch::StartsWith("overlaprun: job failed: mpirun lost contact with host h3 (rank 2)"));
  // Rank 0 losing two hosts at once: its own host is the silent one.
  FailureLog hub({"h1", "h1", "h2", "h3"});
  CHECK(hub.AddLostHost("h2", 0, 10000));
  CHECK_FALSE(hub.AddLostHost("h3", 0, 10100));
  CHECK_THAT(hub.Summary(11000),
             Catch::StartsWith("overlaprun: job failed: rank 0 lost contact with hosts h2, h3 at "
                               "once: host h1 (ranks 0, 1) or its network is down; "));
}

TEST_CASE("a cause reported a few ms late is still found by how it ended", "[report]") {
  // Rank 2 exited with 7; ranks 0, 1 and 3 noticed and exited with 1, one of them reported 3 ms
  // before rank 2's wrapper did.
  FailureLog log;
  log.Add(Report(3, RankReport::How::kExited, 1, 10000));
  log.Add(Report(2, RankReport::How::kExited, 7, 10003));
  log.Add(Report(0, RankReport::How::kExited, 1, 10005));
  log.Add(Report(1, RankReport::How::kExited, 1, 10006));
  CHECK(log.Cause()->rank == 2);
  CHECK(log.ExitStatus(1) == 7);
  // Outside the window the earliest wins, however it ended.
  FailureLog late;
  late.Add(Report(3, RankReport::How::kExited, 1, 10000));
  late.Add(Report(2, RankReport::How::kExited, 7, 10000 + FailureLog::kSimultaneousMs + 1));
  late.Add(Report(0, RankReport::How::kExited, 1, 10002));
  CHECK(late.Cause()->rank == 3);
  // Only two reported in the window (the others were stopped): the rank killed by a signal is
  // the cause, although a peer that lost it exited and was reported 4 ms earlier.
  FailureLog killed;
  killed.Add(Report(3, RankReport::How::kExited, 1, 30000));
  killed.Add(Report(1, RankReport::How::kSignaled, SIGKILL, 30004));
  killed.Add(Report(0, RankReport::How::kSignaled, SIGTERM, 30100, true));
  CHECK(killed.Cause()->rank == 1);
  CHECK(killed.ExitStatus(1) == 137);
  // Rank 2 exited with 7; rank 3 was killed by SIGPIPE writing after the job was torn down (seen
  // in exit_cluster_test): the SIGPIPE is a consequence, not the one signal that names a cause.
  FailureLog piped;
  piped.Add(Report(3, RankReport::How::kSignaled, SIGPIPE, 40000));
  piped.Add(Report(2, RankReport::How::kExited, 7, 40002));
  piped.Add(Report(0, RankReport::How::kExited, 1, 40003));
  piped.Add(Report(1, RankReport::How::kExited, 1, 40004));
  CHECK(piped.Cause()->rank == 2);
  CHECK(piped.ExitStatus(1) == 7);
  // Only SIGPIPE victims failed: one of them is still blamed.
  FailureLog only_piped;
  only_piped.Add(Report(1, RankReport::How::kSignaled, SIGPIPE, 50000));
  CHECK(only_piped.Cause()->rank == 1);
  CHECK(only_piped.ExitStatus(1) == 128 + SIGPIPE);
  // Seen in exit_cluster_test: rank 2 exited with 7, rank 0 saw its control connection close and
  // exited with 1 before rank 2's wrapper reported, rank 3 died of SIGPIPE and rank 1 was
  // stopped. Two statuses, neither the odd one out of several: rank 0's own line names rank 2.
  const std::optional<ExitedPeer> exited =
      ParseExitedPeer("[2026-11-26 10:17:49.252] [error] overlap: rank 0: lost the control "
                      "connection to rank 2 (host h3): the process exited or shut down early");
  REQUIRE(exited.has_value());
  CHECK(exited->peer == 2);
  CHECK(exited->reporter == 0);
  CHECK_FALSE(ParseExitedPeer("overlap: rank 0: lost the control connection to rank 2 (host h3): "
                              "no answer for 5s: the host or its network is down")
                  .has_value());
  CHECK_FALSE(ParseExitedPeer("lost the control connection to rank x (host h3): the process "
                              "exited or shut down early")
                  .has_value());
  FailureLog seen;
  seen.AddExitedPeer(2);
  seen.Add(Report(0, RankReport::How::kExited, 1, 60000));
  seen.Add(Report(3, RankReport::How::kSignaled, SIGPIPE, 60001));
  seen.Add(Report(2, RankReport::How::kExited, 7, 60004));
  seen.Add(Report(1, RankReport::How::kSignaled, SIGTERM, 60100, true));
  CHECK(seen.Cause()->rank == 2);
  CHECK(seen.ExitStatus(1) == 7);
  // Seen in sigkill_local_test under load: rank 1 was killed by SIGKILL; ranks 0 and 3 saw its
  // connection close and exited with 1, and by the time rank 1's wrapper reported, mpirun had
  // asked it to stop, so the report said "stopped". Its peers saw it exit before anything was
  // announced: it is the cause, and its signal is overlaprun's status.
  FailureLog sigkilled;
  sigkilled.AddExitedPeer(1);
  CHECK(sigkilled.Add(Report(0, RankReport::How::kExited, 1, 70000)));
  sigkilled.AddExitedPeer(1);
  sigkilled.Add(Report(3, RankReport::How::kExited, 1, 70001));
  sigkilled.Add(Report(1, RankReport::How::kSignaled, SIGKILL, 70003, true));
  sigkilled.Add(Report(2, RankReport::How::kExited, 1, 70005));
  CHECK(sigkilled.Cause()->rank == 1);
  CHECK(sigkilled.ExitStatus(1) == 128 + SIGKILL);
  CHECK_THAT(sigkilled.Summary(70140),
             Catch::Contains("after it 3 ranks failed and 0 were stopped"));
  // A rank stopped after the announcement, whose peers then saw it go, was stopped.
  FailureLog later;
  CHECK(later.Add(Report(0, RankReport::How::kExited, 3, 80000)));
  later.AddExitedPeer(2);
  later.Add(Report(2, RankReport::How::kSignaled, SIGTERM, 80050, true));
  later.Add(Report(1, RankReport::How::kExited, 1, 80060));
  CHECK(later.Cause()->rank == 0);
  CHECK_THAT(later.Summary(80100), Catch::Contains("after it 1 rank failed and 1 was stopped"));
  // No odd one out: the earliest.
  FailureLog alike;
  alike.Add(Report(1, RankReport::How::kExited, 1, 20004));
  alike.Add(Report(0, RankReport::How::kExited, 1, 20001));
  alike.Add(Report(2, RankReport::How::kExited, 1, 20002));
  CHECK(alike.Cause()->rank == 0);
}

TEST_CASE("ranks stopped by the launcher are blamed only when nothing else failed", "[report]") {
  FailureLog log;
  CHECK_FALSE(log.Add(Report(1, RankReport::How::kSignaled, SIGTERM, 900, true)));
  CHECK(log.Cause()->rank == 1);
  CHECK(log.ExitStatus(0) == 128 + SIGTERM);
  FailureLog none;
  CHECK(none.ExitStatus(213) == 213);
  CHECK_FALSE(none.Cause().has_value());
}

}  // namespace
TEST_CASE("the blamed host is the host list's name for the cause's host", "[report][elastic]") {
  // A discovery script says "node-b"; the rank's own hostname may differ (here "h2").
  FailureLog log({"node-a", "node-b"});
  CHECK(log.BlamedHost().empty());
  CHECK(log.Add(Report(1, RankReport::How::kSignaled, SIGKILL, 1000)));
  CHECK(log.BlamedHost() == "node-b");
}

}  // namespace overlap::launcher
