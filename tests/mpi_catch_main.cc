// main() for multi-rank Catch2 tests. Every rank runs the same test cases in the same order, so
// tests use CHECK (which continues) rather than REQUIRE for values that could differ by rank:
// a rank that skipped ahead would submit different tensors than its peers.
//
// OVERLAP_TEST_RANKS_PER_HOST=k puts every k consecutive ranks on a pretend host of their own
// (OVERLAP_HOST_ID, set before Init), for the hierarchical allreduce on one machine.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/overlap.h"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (const char* per_host = std::getenv("OVERLAP_TEST_RANKS_PER_HOST")) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const int k = std::max(1, std::atoi(per_host));
    setenv("OVERLAP_HOST_ID", ("pretend-host-" + std::to_string(rank / k)).c_str(), 1);
  }
  absl::Status init = overlap::Init();
  if (!init.ok()) {
    std::fprintf(stderr, "overlap::Init failed: %s\n", std::string(init.message()).c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int failures = Catch::Session().run(argc, argv);
  absl::Status down = overlap::Shutdown();
  if (!down.ok())
    std::fprintf(stderr, "overlap::Shutdown failed: %s\n", std::string(down.message()).c_str());
  int local = failures > 0 || !down.ok() ? 1 : 0, any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
