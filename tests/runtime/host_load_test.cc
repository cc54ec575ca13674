// The host load check behind OVERLAP_COORDINATOR_WAIT=auto (runtime/control/host_load.h):
// /proc/loadavg's parsing, the verdict against the CPU count, the refresh, an unreadable file.
#include "runtime/control/host_load.h"

#include <catch2/catch.hpp>
#include "absl/time/clock.h"
#include <cstdlib>
#include <fstream>
#include <string>

namespace overlap {
namespace {

std::string WriteLoad(const std::string& text) {
  std::string path =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
      "/host_load_test_loadavg";
  std::ofstream(path) << text;
  return path;
}

TEST_CASE("the 1-minute load average is read from /proc/loadavg's text") {
  CHECK(ParseLoadAverage("0.52 0.58 0.59 1/467 12345\n") == 0.52);
  CHECK(ParseLoadAverage("  7.25 3.00 1.00 9/100 1") == 7.25);
  CHECK_FALSE(ParseLoadAverage("").has_value());
  CHECK_FALSE(ParseLoadAverage("busy 1.0").has_value());
  CHECK_FALSE(ParseLoadAverage("-1 0 0").has_value());
}

TEST_CASE("a host is oversubscribed when its load reaches its CPUs, read at most once a refresh") {
  const std::string path = WriteLoad("4.10 3.0 2.0 5/300 99\n");
  HostLoad load(path, /*cpus=*/2, absl::Seconds(1));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  CHECK(load.Oversubscribed(t0));
  WriteLoad("0.50 3.0 2.0 1/300 99\n");
  CHECK(load.Oversubscribed(t0 + absl::Milliseconds(500)));  // the last reading stands
  CHECK_FALSE(load.Oversubscribed(t0 + absl::Seconds(1)));   // read again
  WriteLoad("2.00 1.0 1.0 2/300 99\n");
  CHECK(load.Oversubscribed(t0 + absl::Seconds(2)));  // exactly the CPU count counts
  HostLoad roomy(path, /*cpus=*/64);
  CHECK_FALSE(roomy.Oversubscribed(t0));
}

TEST_CASE("an unreadable load file says nothing: not oversubscribed") {
  HostLoad missing("/nonexistent/loadavg", /*cpus=*/1);
  CHECK_FALSE(missing.Oversubscribed(absl::Now()));
  CHECK(UsableCpus() >= 1);
}

}  // namespace
}  // namespace overlap
