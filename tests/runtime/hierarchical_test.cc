// The runtime with OVERLAP_HIERARCHICAL_ALLREDUCE=1 on one machine whose ranks are placed on
// pretend hosts of two (OVERLAP_HOST_ID, set by main before Init from the world rank): the
// runtime must agree on the layout, report it, and give exact sums through negotiated, fused and
// planned steps.
//
// With --mismatch, rank 1 asks for flat allreduces while the others ask for hierarchical ones
// (with --two-stage-mismatch, for no two-stage buckets while the others ask for them): Init must
// fail on every rank, naming rank 1, instead of leaving the ranks in different collectives.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/overlap.h"
#include "tests/runtime/exact_steps.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);

TEST_CASE("the runtime reports the hosts its hierarchical allreduce spans") {
  CHECK(Stats().hierarchy_hosts == Size() / 2);
}

TEST_CASE("hierarchical steps sum exactly, negotiated and then planned") {
  // One tensor above the direct threshold (reduced on its own), two fused into a bucket above
  // the hierarchical threshold, and one below it (flat).
  const std::vector<int64_t> sizes = {(1 << 20) / 4 + 3, 40000, 30001, 100};
  testing::RunExactSteps(sizes, 12, kWait);
  // The last steps ran on the frozen plan: the planned path is hierarchical too.
  CHECK(Stats().plans_frozen >= 1);
}

}  // namespace
}  // namespace overlap

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  setenv("OVERLAP_HOST_ID", absl::StrCat("pretend-host-", rank / 2).c_str(), 1);
  const bool mismatch = argc > 1 && std::string(argv[1]) == "--mismatch";
  const bool two_stage_mismatch = argc > 1 && std::string(argv[1]) == "--two-stage-mismatch";
  if (mismatch || two_stage_mismatch) {
    if (mismatch) {
      setenv("OVERLAP_HIERARCHICAL_ALLREDUCE", rank == 1 ? "0" : "1", 1);
    } else {
      // Ranks that would split their plan's communicators by host and one that would not.
      setenv("OVERLAP_PLANNER", "mgwfbp", 1);
      setenv("OVERLAP_TWO_STAGE", rank == 1 ? "off" : "on", 1);
    }
    absl::Status init = overlap::Init();
    const std::string message(init.message());
    const bool named =
        !init.ok() &&
        (mismatch ? message.find("OVERLAP_HIERARCHICAL_ALLREDUCE differs between ranks") !=
                            std::string::npos &&
                        message.find("rank 0 has 1, rank 1 has 0") != std::string::npos
                  : message.find("OVERLAP_TWO_STAGE must be the same on every rank") !=
                            std::string::npos &&
                        message.find("rank 0 has on, rank 1 has off") != std::string::npos);
    std::fprintf(stderr, "rank %d: Init: %s\n", rank, init.ok() ? "ok" : message.c_str());
    int bad = named ? 0 : 1, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
  }
  setenv("OVERLAP_HIERARCHICAL_ALLREDUCE", "1", 1);
  absl::Status init = overlap::Init();
  if (!init.ok()) {
    std::fprintf(stderr, "overlap::Init failed: %s\n", std::string(init.message()).c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int failures = Catch::Session().run(1, argv);
  absl::Status down = overlap::Shutdown();
  int local = failures > 0 || !down.ok() ? 1 : 0, any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
