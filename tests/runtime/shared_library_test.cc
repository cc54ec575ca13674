// A program that takes the whole runtime from liboverlap.so, as the framework adapters do.
#include <cstdio>
#include <vector>

#include "runtime/overlap.h"

int main() {
  absl::Status init = overlap::Init();
  if (!init.ok()) {
    std::fprintf(stderr, "Init: %s\n", std::string(init.message()).c_str());
    return 1;
  }
  std::vector<float> x(1000, static_cast<float>(overlap::Rank() + 1));
  const overlap::Tensor t = overlap::MakeTensor(x.data(), {1000});
  absl::StatusOr<overlap::Handle> h =
      overlap::Allreduce("shared.x", t, t, {overlap::ReduceOp::kSum});
  const int n = overlap::Size();
  const bool ok = h.ok() && h->Wait(absl::Seconds(30)).ok() && x[999] == n * (n + 1) / 2.0f;
  const bool down = overlap::Shutdown().ok();
  std::printf("rank result %s\n", ok && down ? "ok" : "WRONG");
  return ok && down ? 0 : 1;
}
