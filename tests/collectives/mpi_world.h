// This process's place in MPI_COMM_WORLD, and running a collective to its end, for the executor
// tests that run below the runtime.
#ifndef OVERLAP_TESTS_COLLECTIVES_MPI_WORLD_H_
#define OVERLAP_TESTS_COLLECTIVES_MPI_WORLD_H_

#include <mpi.h>

#include <catch2/catch.hpp>

#include "collectives/executor.h"

namespace overlap::testing {

inline int Rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int Size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Tests `work` until it ends; every Test must succeed.
inline void RunToEnd(Work& work) {
  while (true) {
    absl::StatusOr<bool> done = work.Test();
    REQUIRE(done.ok());
    if (*done) return;
  }
}

}  // namespace overlap::testing

#endif  // OVERLAP_TESTS_COLLECTIVES_MPI_WORLD_H_
