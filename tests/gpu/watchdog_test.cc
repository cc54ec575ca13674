// The watchdog's abort path: a CUDA allreduce that cannot complete (its producer stream is held,
// as a dead peer would hold an NCCL kernel) fails within OVERLAP_COLLECTIVE_TIMEOUT_S with an
// error naming the tensor and the timeout, the runtime aborts its NCCL communicators, and the
// program goes on: nothing hangs. One rank; skips without a GPU (fails with OVERLAP_REQUIRE_GPU).
#include <cuda_runtime.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "collectives/buffer_ops.h"
#include "runtime/overlap.h"

namespace {

int Fail(const std::string& why) {
  std::fprintf(stderr, "FAILED: %s\n", why.c_str());
  return 1;
}

int Run() {
  using overlap::Device;
  if (overlap::CudaDeviceCount() == 0) {
    const std::string reason = overlap::CudaUnavailableReason();
    const char* require = std::getenv("OVERLAP_REQUIRE_GPU");
    if (require != nullptr && std::string(require) == "1") return Fail("no GPU: " + reason);
    std::printf("SKIPPED: watchdog test: no GPU: %s\n", reason.c_str());
    return 0;
  }
  absl::Status init = overlap::Init();
  if (!init.ok()) return Fail(std::string(init.message()));
  float* data = nullptr;
  cudaMalloc(&data, 1024 * sizeof(float));
  overlap::Tensor t = overlap::MakeTensor(data, {1024});
  t.device = Device::Cuda(0);
  // A first allreduce sets up the CUDA plane (NCCL communicators, buffers): setup allocates
  // device memory, which waits for the whole device, so it must not meet the held stream below.
  absl::StatusOr<overlap::Handle> warm = overlap::Allreduce("warm.up", t, t);
  if (!warm.ok() || !warm->Wait(absl::Seconds(60)).ok()) return Fail("the warm-up failed");
  if (overlap::Stats().cuda_executor != "nccl") return Fail("expected the NCCL executor");
  cudaStream_t producer;
  cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking);
  std::atomic<bool> release{false};
  cudaLaunchHostFunc(
      producer,
      [](void* flag) {
        while (!static_cast<std::atomic<bool>*>(flag)->load()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      },
      &release);
  t.stream = producer;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<overlap::Handle> h = overlap::Allreduce("stuck.gradient", t, t);
  if (!h.ok()) return Fail(std::string(h.status().message()));
  absl::Status s = h->Wait(absl::Seconds(60));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string message(s.message());
  std::printf("allreduce ended after %.1f s: %s\n", seconds, s.ToString().c_str());
  int rc = 0;
  if (s.ok()) rc = Fail("the stuck allreduce succeeded");
  if (s.code() != absl::StatusCode::kDeadlineExceeded) rc = Fail("expected DeadlineExceeded");
  if (message.find("stuck.gradient") == std::string::npos ||
      message.find("OVERLAP_COLLECTIVE_TIMEOUT_S") == std::string::npos ||
      message.find("rank 0") == std::string::npos) {
    rc = Fail("the error does not name the rank, the tensor and the timeout");
  }
  if (seconds > 20) rc = Fail("the timeout took more than 20 s");
  // After the abort, new work fails at once instead of hanging.
  absl::StatusOr<overlap::Handle> after = overlap::Allreduce("after.abort", t, t);
  if (after.ok() && after->Wait(absl::Seconds(10)).ok()) rc = Fail("work after the abort ran");
  release = true;
  cudaStreamSynchronize(producer);
  (void)overlap::Shutdown();  // returns the fatal error
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int rc = Run();
  if (rc == 0) std::printf("PASSED: watchdog test\n");
  // The runtime's fatal error left MPI itself usable (one rank; NCCL failed, not MPI).
  MPI_Finalize();
  return rc;
}
