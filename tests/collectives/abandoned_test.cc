// Works dropped while their collective is in flight, as the runtime drops them when the job
// fails (a peer's host went down): the process must stay alive so that the error it is about to
// report reaches the user. A non-blocking collective's request may be neither freed nor cancelled
// (MPI 3.1, 5.12); Open MPI answers MPI_Request_free of one with MPI_ERR_REQUEST, fatal on
// MPI_COMM_WORLD, which once aborted rank 0 of the linkdown cluster test before its error printed.
//
// Rank 0 starts and drops the work; the other ranks then complete the same collective with a
// work that needs nothing more from rank 0, so the abandoned request ends inside MPI and the job
// finishes cleanly.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/link_probe.h"
#include "collectives/mpi_executor.h"
#include "collectives/segmented_allreduce.h"
#include "tests/collectives/mpi_world.h"

namespace overlap {
namespace {

using testing::Rank;
using testing::RunToEnd;

constexpr int64_t kSegmentFloats = static_cast<int64_t>(SegmentedAllreduce::kSegmentBytes / 4);

// A communicator of its own, never used again, so the abandoned collective meets nothing else.
MPI_Comm FreshComm() {
  MPI_Comm comm = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_dup(MPI_COMM_WORLD, &comm) == MPI_SUCCESS);
  return comm;
}

CollectiveArgs FloatSum(int64_t count, float* data) {
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllreduce;
  args.dtype = DataType::kFloat32;
  args.op = ReduceOp::kSum;
  args.count = count;
  args.recv = data;
  return args;
}

TEST_CASE("a segmented allreduce dropped in its first segment leaves the process running") {
  const MPI_Comm comm = FreshComm();
  absl::StatusOr<std::unique_ptr<MpiExecutor>> executor = MpiExecutor::Create(comm, 1);
  REQUIRE(executor.ok());
  // MPI may still write the abandoned segment's result: the buffer outlives the test.
  auto* data = new std::vector<float>(static_cast<size_t>(kSegmentFloats + 1), 1.0F);
  if (Rank() == 0) {
    // Two segments; the first is in flight when the work is dropped.
    absl::StatusOr<std::unique_ptr<Work>> work =
        (*executor)->Start(0, FloatSum(kSegmentFloats + 1, data->data()));
    REQUIRE(work.ok());
    REQUIRE(dynamic_cast<SegmentedAllreduce*>(work->get()) != nullptr);
    work->reset();
  } else {
    // Exactly one segment: the same call as rank 0's first, which ends it.
    absl::StatusOr<std::unique_ptr<Work>> work =
        (*executor)->Start(0, FloatSum(kSegmentFloats, data->data()));
    REQUIRE(work.ok());
    RunToEnd(**work);
  }
  // Rank 0 reaches here only if the drop did not abort it; its barrier progresses the rest.
  CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
}

TEST_CASE("a link probe dropped in its opening barrier leaves the process running") {
  const MPI_Comm comm = FreshComm();
  if (Rank() == 0) {
    absl::StatusOr<std::unique_ptr<LinkProbe>> probe = LinkProbe::Start(comm, /*tag=*/7);
    REQUIRE(probe.ok());
    probe->reset();
  } else {
    // The probe's opening barrier, which is all that rank 0 joined.
    MPI_Request request = MPI_REQUEST_NULL;
    REQUIRE(MPI_Ibarrier(comm, &request) == MPI_SUCCESS);
    REQUIRE(MPI_Wait(&request, MPI_STATUS_IGNORE) == MPI_SUCCESS);
  }
  CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
}

}  // namespace
}  // namespace overlap
