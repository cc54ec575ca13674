// The control connections' shutdown handshake (runtime/control_plane.h): a worker whose
// coordinator read rank 0's release in its last Wait must not wait for it again in AwaitRelease.
#include "runtime/control_plane.h"

#include <mpi.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"

namespace overlap {
namespace {

TEST_CASE("a release read by the last Wait still ends AwaitRelease at once") {
  MPI_Comm comm = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_dup(MPI_COMM_WORLD, &comm) == MPI_SUCCESS);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<std::string> hosts(static_cast<size_t>(size), "localhost");
  absl::StatusOr<std::unique_ptr<ControlPlane>> control =
      ControlPlane::Connect(comm, hosts, absl::Seconds(30), absl::Seconds(30));
  REQUIRE(control.ok());
  (*control)->ExpectClose();
  if (rank == 0) (*control)->ReleasePeers();
  MPI_Barrier(comm);  // the release is on its way to every worker
  if (rank == 0) {
    (*control)->AwaitPeersClosed(absl::Seconds(20));
  } else {
    // The coordinator's last look at the control connection takes the release with it.
    absl::StatusOr<ControlEvents> events = (*control)->Wait(absl::Seconds(5), -1);
    REQUIRE(events.ok());
    CHECK(events->rounds_announced == 0);
    const absl::Time start = absl::Now();
    (*control)->AwaitRelease(absl::Seconds(20));
    CHECK(absl::Now() - start < absl::Seconds(2));
  }
  control->reset();
  MPI_Comm_free(&comm);
}

}  // namespace
}  // namespace overlap
