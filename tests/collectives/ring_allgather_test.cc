// The ring allgather (collectives/ring_allgather.h) against values computed on every rank: uneven
// and empty chunks, gaps between chunks, the input already in place, two rings in flight on one
// communicator, and the executor's choice of the ring for large allgathers.
#include "collectives/ring_allgather.h"

#include <mpi.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "collectives/mpi_executor.h"
#include "tests/collectives/mpi_world.h"

namespace overlap {
namespace {

using testing::Rank;
using testing::Size;

// Rank q's element i: distinct for every (q, i), and not an integer, so a misplaced or doubled
// chunk shows.
double Value(int q, int64_t i) { return q * 1000.5 + static_cast<double>(i) * 0.25; }

std::vector<int> Counts(int base, int skew) {
  std::vector<int> counts(static_cast<size_t>(Size()));
  for (int r = 0; r < Size(); ++r) counts[static_cast<size_t>(r)] = base + r * skew;
  return counts;
}

// Chunk q at the sum of the counts before it plus q * gap elements.
std::vector<int> Displs(const std::vector<int>& counts, int gap) {
  std::vector<int> displs(counts.size(), 0);
  for (size_t q = 1; q < counts.size(); ++q) displs[q] = displs[q - 1] + counts[q - 1] + gap;
  return displs;
}

template <typename T>
void RunToEnd(std::unique_ptr<T>& work) {
  while (true) {
    absl::StatusOr<bool> done = work->Test();
    REQUIRE(done.ok());
    if (*done) return;
  }
}

// Checks every chunk of `out`, and that the gaps still hold `fill`.
void CheckGathered(const std::vector<double>& out, const std::vector<int>& counts,
                   const std::vector<int>& displs, double fill) {
  std::vector<bool> covered(out.size(), false);
  for (int q = 0; q < Size(); ++q) {
    for (int i = 0; i < counts[static_cast<size_t>(q)]; ++i) {
      const size_t at = static_cast<size_t>(displs[static_cast<size_t>(q)] + i);
      covered[at] = true;
      INFO("rank " << q << " element " << i);
      CHECK(out[at] == Value(q, i));
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (!covered[i]) CHECK(out[i] == fill);
  }
}

TEST_CASE("ring allgather: float64 with uneven and empty chunks, and gaps") {
  for (const auto& [base, skew, gap] : {std::tuple{0, 3, 0}, std::tuple{1000, 17, 0},
                                        std::tuple{5, 0, 2}, std::tuple{0, 0, 0}}) {
    const std::vector<int> counts = Counts(base, skew);
    const std::vector<int> displs = Displs(counts, gap);
    const size_t total = static_cast<size_t>(displs.back() + counts.back());
    std::vector<double> in(static_cast<size_t>(counts[static_cast<size_t>(Rank())]));
    for (size_t i = 0; i < in.size(); ++i) in[i] = Value(Rank(), static_cast<int64_t>(i));
    std::vector<double> out(total, -7.0);
    auto ring = RingAllgather::Start(MPI_COMM_WORLD, 5, in.data(), out.data(), counts, displs,
                                     MPI_DOUBLE, sizeof(double));
    REQUIRE(ring.ok());
    RunToEnd(*ring);
    CheckGathered(out, counts, displs, -7.0);
  }
}

TEST_CASE("ring allgather: this rank's chunk already in place") {
  const std::vector<int> counts = Counts(777, 1);
  const std::vector<int> displs = Displs(counts, 0);
  std::vector<double> out(static_cast<size_t>(displs.back() + counts.back()), -1.0);
  double* own = out.data() + displs[static_cast<size_t>(Rank())];
  for (int i = 0; i < counts[static_cast<size_t>(Rank())]; ++i) own[i] = Value(Rank(), i);
  auto ring = RingAllgather::Start(MPI_COMM_WORLD, 6, own, out.data(), counts, displs, MPI_DOUBLE,
                                   sizeof(double));
  REQUIRE(ring.ok());
  RunToEnd(*ring);
  CheckGathered(out, counts, displs, -1.0);
}

TEST_CASE("ring allgather: two rings in flight on one communicator") {
  const std::vector<int> small = Counts(100, 1), large = Counts(200000, 0);
  const std::vector<int> small_displs = Displs(small, 0), large_displs = Displs(large, 0);
  std::vector<double> a(static_cast<size_t>(large[static_cast<size_t>(Rank())]));
  std::vector<double> b(static_cast<size_t>(small[static_cast<size_t>(Rank())]));
  for (size_t i = 0; i < a.size(); ++i) a[i] = Value(Rank(), static_cast<int64_t>(i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = Value(Rank(), static_cast<int64_t>(i));
  std::vector<double> out_a(static_cast<size_t>(large_displs.back() + large.back()));
  std::vector<double> out_b(static_cast<size_t>(small_displs.back() + small.back()));
  auto ra = RingAllgather::Start(MPI_COMM_WORLD, 21, a.data(), out_a.data(), large, large_displs,
                                 MPI_DOUBLE, sizeof(double));
  auto rb = RingAllgather::Start(MPI_COMM_WORLD, 22, b.data(), out_b.data(), small, small_displs,
                                 MPI_DOUBLE, sizeof(double));
  REQUIRE(ra.ok());
  REQUIRE(rb.ok());
  bool done_a = false, done_b = false;
  while (!done_a || !done_b) {
    if (!done_b) done_b = *(*rb)->Test();
    if (!done_a) done_a = *(*ra)->Test();
  }
  CheckGathered(out_a, large, large_displs, 0.0);
  CheckGathered(out_b, small, small_displs, 0.0);
}

TEST_CASE("the MPI executor runs large allgathers on the ring, small ones on MPI") {
  absl::StatusOr<std::unique_ptr<MpiExecutor>> executor = MpiExecutor::Create(MPI_COMM_WORLD, 2);
  REQUIRE(executor.ok());
  for (int per_rank : {10, 1 << 16}) {  // 80 B and 512 KiB per rank
    const std::vector<int> counts = Counts(per_rank, 1);
    const std::vector<int> displs = Displs(counts, 0);
    std::vector<double> in(static_cast<size_t>(counts[static_cast<size_t>(Rank())]));
    for (size_t i = 0; i < in.size(); ++i) in[i] = Value(Rank(), static_cast<int64_t>(i));
    std::vector<double> out(static_cast<size_t>(displs.back() + counts.back()));
    CollectiveArgs args;
    args.kind = CollectiveKind::kAllgatherv;
    args.dtype = DataType::kFloat64;
    args.send = in.data();
    args.recv = out.data();
    args.recv_counts.assign(counts.begin(), counts.end());
    args.recv_displs.assign(displs.begin(), displs.end());
    for (int channel = 0; channel < 2; ++channel) {
      std::fill(out.begin(), out.end(), 0.0);
      auto work = (*executor)->Start(channel, args);
      REQUIRE(work.ok());
      RunToEnd(*work);
      CheckGathered(out, counts, displs, 0.0);
    }
  }
}

}  // namespace
}  // namespace overlap
