// Init and Shutdown: calls before Init and after Shutdown, a bad OVERLAP_* value on one rank
// (every rank must fail Init with that rank's reason), double Init, double Shutdown.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

TEST_CASE("lifecycle", "[lifecycle]") {
  std::vector<float> x(4, 1.0f);
  const Tensor t = MakeTensor(x.data(), {4});

  // Before Init.
  CHECK(!IsInitialized());
  CHECK(Rank() == -1);
  absl::StatusOr<Handle> early = Allreduce("early", t, t);
  REQUIRE(!early.ok());
  CHECK(early.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(early.status().message() ==
        "allreduce 'early': overlap is not initialised (call overlap::Init() first, and not after "
        "Shutdown())");

  // A bad value on rank 1 only: every rank fails, and every rank is told why.
  if (WorldRank() == 1) setenv("OVERLAP_NUM_CHANNELS", "banana", 1);
  absl::Status bad = Init();
  unsetenv("OVERLAP_NUM_CHANNELS");
  INFO(bad.message());
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StartsWith(
      bad.message(),
      absl::StrCat("rank ", WorldRank(),
                   ": Init failed: rank 1: OVERLAP_NUM_CHANNELS='banana' is not valid")));
  CHECK(!IsInitialized());

  // Out of range in code, also refused.
  Config config;
  config.stall_warning_s = 10;
  config.stall_timeout_s = 5;
  absl::Status range = Init(config);
  CHECK(absl::StrContains(range.message(),
                          "OVERLAP_STALL_TIMEOUT_S=5 is below OVERLAP_STALL_WARNING_S=10"));

  REQUIRE(Init().ok());
  CHECK(Rank() == WorldRank());
  CHECK(LocalSize() >= 1);
  CHECK(Init().code() == absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Handle> ok = Allreduce("ok", t, t, {ReduceOp::kSum});
  REQUIRE(ok.ok());
  CHECK(ok->Wait(absl::Seconds(30)).ok());
  CHECK(x[0] == static_cast<float>(Size()));
  CHECK(Shutdown().ok());
  CHECK(Shutdown().ok());  // a no-op

  absl::StatusOr<Handle> late = Allreduce("late", t, t);
  REQUIRE(!late.ok());
  CHECK(late.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Rank() == -1);
}

}  // namespace
}  // namespace overlap

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int failures = Catch::Session().run(argc, argv);
  int local = failures > 0 ? 1 : 0, any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
