// CommMeter: the network's busy time per step, each instant counted once.
#include "runtime/plan/comm_meter.h"

#include <catch2/catch.hpp>

namespace overlap {
namespace {

absl::Time At(double ms) { return absl::UnixEpoch() + absl::Milliseconds(ms); }

TEST_CASE("busy time is the union of the collectives' spans, per step", "[comm_meter]") {
  CommMeter meter(3);
  CHECK(meter.busy_ms_per_step() == 0);
  meter.Add(At(0), At(5));  // before the first forward marker: no step to count it in
  meter.OnForward();
  CHECK(meter.busy_ms_per_step() == 0);
  meter.Add(At(10), At(20));
  meter.Add(At(15), At(25));  // queued behind the first: only its last 5 ms are new
  meter.Add(At(30), At(32));
  meter.OnForward();
  CHECK(meter.busy_ms_per_step() == 17);
  meter.Add(At(40), At(41));
  meter.OnForward();
  CHECK(meter.busy_ms_per_step() == 9);  // median of 17 and 1
  meter.Add(At(50), At(53));
  meter.OnForward();
  CHECK(meter.busy_ms_per_step() == 3);  // median of 17, 1, 3
  meter.OnForward();                     // a step with no collective; 17 leaves the window
  CHECK(meter.busy_ms_per_step() == 1);  // median of 1, 3, 0
}

}  // namespace
}  // namespace overlap
