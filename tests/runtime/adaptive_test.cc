// The runtime with OVERLAP_ADAPTIVE_ALLREDUCE (collectives/link_adaptation.h) on one machine whose
// ranks are placed on pretend hosts (OVERLAP_HOST_ID, set by main before Init from the world
// rank). Links here are all alike, so "on" forces the weighted allreduce: exact sums through
// negotiated, fused and planned steps, and Stats reporting the probes, the weighted allreduces
// and each host's rate.
//   (no argument)   one pretend host per rank, flat allreduces, adaptation on
//   --hierarchical  pretend hosts of two ranks, OVERLAP_HIERARCHICAL_ALLREDUCE=1, adaptation on:
//                   the cross-host phase is the weighted one
//   --auto          the ranks' real host (one machine), adaptation auto: nothing is probed
//   --mismatch      rank 1 asks for off, the others for on: Init fails on every rank, naming it
// Every probe must also be a span on the timeline's "link probe" track (OVERLAP_TIMELINE).
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

constexpr absl::Duration kWait = absl::Seconds(60);
std::string g_mode;  // NOLINT: set once by main before the tests run

TEST_CASE("adaptive steps sum exactly, negotiated and then planned") {
  // Two tensors above the 1 MiB adaptive threshold (one of several segments), two fused into a
  // bucket below it, and one small one.
  const std::vector<int64_t> sizes = {(1 << 20) / 4 + 3, (9 << 20) / 4 + 1, 40000, 30001, 100};
  testing::RunExactSteps(sizes, 10, kWait);
  CHECK(Stats().plans_frozen >= 1);
  const RuntimeStats stats = Stats();
  INFO("link_rates: " << stats.link_rates);
  if (g_mode == "--auto") {
    CHECK(stats.link_probes == 0);
    CHECK(stats.weighted_allreduces == 0);
    CHECK(stats.link_rates.empty());
    return;
  }
  // The negotiated and the planned executor each probed once; 2 large tensors x 10 steps ran
  // weighted (hierarchical: each is one weighted cross-host phase per allreduce).
  CHECK(stats.link_probes >= 2);
  CHECK(stats.weighted_allreduces >= 20);
  const int hosts = g_mode == "--hierarchical" ? Size() / 2 : Size();
  for (int h = 0; h < hosts; ++h) {
    CHECK(stats.link_rates.find(absl::StrCat("pretend-host-", h, " ")) != std::string::npos);
  }
  CHECK(stats.link_rates.find(" MB/s ") != std::string::npos);
}

}  // namespace
}  // namespace overlap

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  overlap::g_mode = argc > 1 ? argv[1] : "";
  const std::string& mode = overlap::g_mode;
  if (mode != "--auto") {
    const int host = mode == "--hierarchical" ? rank / 2 : rank;
    setenv("OVERLAP_HOST_ID", absl::StrCat("pretend-host-", host).c_str(), 1);
  }
  if (mode == "--hierarchical") setenv("OVERLAP_HIERARCHICAL_ALLREDUCE", "1", 1);
  const char* tmp = getenv("TEST_TMPDIR");
  setenv("OVERLAP_TIMELINE", absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/adaptive_timeline.json").c_str(), 1);
  setenv("OVERLAP_ADAPTIVE_ALLREDUCE", mode == "--auto" ? "auto" : "on", 1);
  if (mode == "--mismatch") {
    setenv("OVERLAP_ADAPTIVE_ALLREDUCE", rank == 1 ? "off" : "on", 1);
    absl::Status init = overlap::Init();
    const std::string message(init.message());
    const bool named =
        !init.ok() &&
        message.find("OVERLAP_ADAPTIVE_ALLREDUCE must be the same on every rank: rank 0 has on, "
                     "rank 1 has off") != std::string::npos;
    std::fprintf(stderr, "rank %d: Init: %s\n", rank, init.ok() ? "ok" : message.c_str());
    int bad = named ? 0 : 1, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
  }
  absl::Status init = overlap::Init();
  if (!init.ok()) {
    std::fprintf(stderr, "overlap::Init failed: %s\n", std::string(init.message()).c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int failures = Catch::Session().run(1, argv);
  absl::Status down = overlap::Shutdown();
  // Each probe is a span on the timeline's "link probe" track, named by what it measured; rank
  // 0's file is whole once Shutdown closed it.
  bool traced = true;
  if (rank == 0 && mode != "--auto") {
    std::string text;
    if (std::FILE* file = std::fopen(getenv("OVERLAP_TIMELINE"), "r")) {
      char buffer[4096];
      for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), file)) > 0;) text.append(buffer, n);
      std::fclose(file);
    }
    traced = text.find("\"link probe\"") != std::string::npos &&
             text.find("link probe, channel 0: pretend-host-0 ") != std::string::npos;
    if (!traced) std::fprintf(stderr, "rank 0: no link probe span in the timeline\n");
  }
  int local = failures > 0 || !down.ok() || !traced ? 1 : 0, any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
