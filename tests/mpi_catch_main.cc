// main() for multi-rank Catch2 tests. Every rank runs the same test cases in the same order, so
// tests use CHECK (which continues) rather than REQUIRE for values that could differ by rank:
// a rank that skipped ahead would submit different tensors than its peers.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdio>

#include "runtime/overlap.h"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
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
