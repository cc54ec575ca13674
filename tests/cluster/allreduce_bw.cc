// Allreduce bus bandwidth through the overlap runtime and through plain MPI_Allreduce, on the same
// ranks and sizes in one run (DESIGN.md section 11). Prints one line per API on rank 0:
//   allreduce_bw api=overlap|mpi ranks=N bytes=B iters=I seconds=S algbw_MBps=A busbw_MBps=U
// bus bandwidth = algorithm bandwidth x 2(n-1)/n, comparable to a link's rate because a ring
// allreduce moves that many bytes over every rank's link.
//   allreduce_bw [BYTES [ITERS]]     defaults: 32 MiB, 5
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

void Print(const char* api, int64_t bytes, int iters, double seconds) {
  double slowest = 0;
  MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (Rank() != 0) {
    return;
  }
  const double algbw = static_cast<double>(bytes) * iters / slowest / 1e6;
  const double busbw = algbw * 2.0 * (Size() - 1) / Size();
  std::printf(
      "allreduce_bw api=%s ranks=%d bytes=%lld iters=%d seconds=%.3f algbw_MBps=%.1f "
      "busbw_MBps=%.1f\n",
      api, Size(), static_cast<long long>(bytes), iters, slowest, algbw, busbw);
  std::fflush(stdout);
}

absl::Status RuntimeAllreduce(std::vector<float>& data, int i) {
  Tensor t = MakeTensor(data.data(), {static_cast<int64_t>(data.size())});
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  absl::StatusOr<Handle> h = Allreduce(absl::StrCat("bw.", i % 2), t, t, sum);
  if (!h.ok()) {
    return h.status();
  }
  return h->Wait(absl::Seconds(120));
}

int Main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (absl::Status s = Init(); !s.ok()) {
    std::fprintf(stderr, "allreduce_bw: Init: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const int64_t bytes = argc > 1 ? std::atoll(argv[1]) : int64_t{32} << 20;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<float> data(static_cast<size_t>(bytes) / sizeof(float), 1.0f);

  // Warm-up rounds open every connection and fill the runtime's response cache before timing.
  for (int i = 0; i < 2; ++i) {
    if (absl::Status s = RuntimeAllreduce(data, i); !s.ok()) {
      std::fprintf(stderr, "allreduce_bw: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    if (absl::Status s = RuntimeAllreduce(data, i); !s.ok()) {
      std::fprintf(stderr, "allreduce_bw: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  Print("overlap", bytes, iters, MPI_Wtime() - start);

  const int count = static_cast<int>(data.size());
  MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  Print("mpi", bytes, iters, MPI_Wtime() - start);

  absl::Status down = Shutdown();
  MPI_Finalize();
  return down.ok() ? 0 : 1;
}

}  // namespace
}  // namespace overlap

int main(int argc, char** argv) { return overlap::Main(argc, argv); }
