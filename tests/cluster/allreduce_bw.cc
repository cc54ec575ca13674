// Measures allreduce bus bandwidth with plain MPI_Allreduce on MPI_COMM_WORLD: the baseline the
// namespace cluster's bandwidth cap is checked against. Prints one line on rank 0:
//   allreduce_bw api=mpi ranks=N bytes=B iters=I seconds=S algbw_MBps=A busbw_MBps=U
// bus bandwidth = algorithm bandwidth x 2(n-1)/n (DESIGN.md section 11), comparable to a link's
// rate because a ring allreduce moves that many bytes over every rank's link.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long bytes = argc > 1 ? std::atol(argv[1]) : 32L << 20;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<float> data(static_cast<size_t>(bytes) / sizeof(float), 1.0f);
  const int count = static_cast<int>(data.size());
  // One warm-up round opens every TCP connection before timing.
  MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  const double seconds = MPI_Wtime() - start;
  double slowest = 0;
  MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    const double algbw = static_cast<double>(bytes) * iters / slowest / 1e6;
    const double busbw = algbw * 2.0 * (size - 1) / size;
    std::printf("allreduce_bw api=mpi ranks=%d bytes=%ld iters=%d seconds=%.3f algbw_MBps=%.1f "
                "busbw_MBps=%.1f\n",
                size, bytes, iters, slowest, algbw, busbw);
  }
  MPI_Finalize();
  return 0;
}
