// A training-like loop of allreduces through the overlap runtime that can be told to fail.
//
//   failure_loop [--steps=N] [--tensors=K] [--tensor-kb=KB] [--compute-ms=MS] [--wait-s=S]
//                [--fail-rank=R --fail-step=S --mode=exit|sigkill|stop [--exit-code=C]]
//                [--run-id=ID]  (ignored: marks one test's processes so it can check none are left)
//
// Each step submits K gradients (KB KiB of fp32 each) for averaging, waits for all of them and
// checks the averages, then "computes" for MS ms. On rank R at step S it injects the failure:
//   exit     exits with status C at once, without Shutdown (a crash the program noticed)
//   sigkill  kills itself with SIGKILL (the OOM killer, a segfault without a handler)
//   stop     stops submitting and sleeps (a hung data loader): its peers must not hang
// Every other rank must stop on its own: a failed handle ends it with status 1 and one line
// naming the rank, host, step and the runtime's error. The injection time is printed in ms since
// the epoch so tests can measure how long the job took to stop.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

// A handle that fails ends the rank with this status: distinct from the injected exit codes.
constexpr int kRuntimeFailed = 1;
constexpr int kBadArguments = 2;

struct Flags {
  int steps = 20;
  int tensors = 4;
  int tensor_kb = 256;
  int compute_ms = 20;
  double wait_s = 120;  // a backstop only: the runtime's own timeouts should fire first
  int fail_rank = -1;
  int fail_step = -1;
  std::string mode = "none";
  int exit_code = 3;
};

bool ParseFlag(const std::string& arg, Flags& f) {
  const size_t eq = arg.find('=');
  if (!absl::StartsWith(arg, "--") || eq == std::string::npos) {
    return false;
  }
  const std::string key = arg.substr(2, eq - 2), value = arg.substr(eq + 1);
  if (key == "mode") {
    f.mode = value;
    return value == "none" || value == "exit" || value == "sigkill" || value == "stop";
  }
  if (key == "run-id") {
    return true;  // only marks the processes of one test run, for pgrep
  }
  if (key == "wait-s") {
    return absl::SimpleAtod(value, &f.wait_s) && f.wait_s > 0;
  }
  int* target = key == "steps"        ? &f.steps
                : key == "tensors"    ? &f.tensors
                : key == "tensor-kb"  ? &f.tensor_kb
                : key == "compute-ms" ? &f.compute_ms
                : key == "fail-rank"  ? &f.fail_rank
                : key == "fail-step"  ? &f.fail_step
                : key == "exit-code"  ? &f.exit_code
                                      : nullptr;
  return target != nullptr && absl::SimpleAtoi(value, target);
}

std::string Host() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "failure_loop: rank %d (host %s): %s\n", Rank(), Host().c_str(),
               what.c_str());
  std::fflush(stderr);
  // No Shutdown: it is collective and the peers may be gone. The process exit closes the
  // runtime's sockets, which tells the peers at once.
  std::_Exit(kRuntimeFailed);
}

void Inject(const Flags& f, int step) {
  std::fprintf(stderr, "failure_loop: rank %d (host %s) injects '%s' at step %d at_ms=%lld\n",
               Rank(), Host().c_str(), f.mode.c_str(), step, static_cast<long long>(NowMs()));
  std::fflush(stderr);
  if (f.mode == "exit") {
    std::_Exit(f.exit_code);
  }
  if (f.mode == "sigkill") {
    raise(SIGKILL);
  }
  if (f.mode == "stop") {
    while (true) {
      pause();
    }
  }
}

// Rank r contributes (r + 1) * (step + 1) + i to gradient i; the average over n ranks is
// (n + 1) / 2 * (step + 1) + i.
void RunStep(const Flags& f, int step, std::vector<std::vector<float>>& grads) {
  std::vector<Handle> handles;
  for (int i = 0; i < f.tensors; ++i) {
    std::vector<float>& g = grads[static_cast<size_t>(i)];
    std::fill(g.begin(), g.end(), static_cast<float>((Rank() + 1) * (step + 1) + i));
    absl::StatusOr<Handle> h =
        Allreduce(absl::StrCat("grad.", i), MakeTensor(g.data(), {static_cast<int64_t>(g.size())}),
                  MakeTensor(g.data(), {static_cast<int64_t>(g.size())}));
    if (!h.ok()) {
      Die(absl::StrCat("step ", step, ": submitting grad.", i, ": ", h.status().message()));
    }
    handles.push_back(*h);
  }
  for (int i = 0; i < f.tensors; ++i) {
    absl::Status s = handles[static_cast<size_t>(i)].Wait(absl::Seconds(f.wait_s));
    if (!s.ok()) {
      Die(absl::StrCat("step ", step, ": grad.", i, ": ", s.message()));
    }
    const float want = (Size() + 1) / 2.0f * static_cast<float>(step + 1) + static_cast<float>(i);
    const float got = grads[static_cast<size_t>(i)][0];
    if (std::fabs(got - want) > 1e-3f * std::fabs(want)) {
      Die(absl::StrCat("step ", step, ": grad.", i, " averaged to ", got, ", expected ", want));
    }
  }
}

int Main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    if (!ParseFlag(argv[i], f)) {
      std::fprintf(stderr,
                   "failure_loop: bad argument '%s' (see the comment atop failure_loop.cc)\n",
                   argv[i]);
      return kBadArguments;
    }
  }
  if (absl::Status s = Init(); !s.ok()) {
    std::fprintf(stderr, "failure_loop: Init failed on host %s: %s\n", Host().c_str(),
                 std::string(s.message()).c_str());
    return kRuntimeFailed;
  }
  std::vector<std::vector<float>> grads(static_cast<size_t>(f.tensors),
                                        std::vector<float>(static_cast<size_t>(f.tensor_kb) * 256));
  for (int step = 0; step < f.steps; ++step) {
    if (Rank() == f.fail_rank && step == f.fail_step) {
      Inject(f, step);
    }
    RunStep(f, step, grads);
    if (Rank() == 0) {
      std::printf("failure_loop: step %d done\n", step);
      std::fflush(stdout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(f.compute_ms));
  }
  if (absl::Status s = Shutdown(); !s.ok()) {
    Die(absl::StrCat("Shutdown: ", s.message()));
  }
  if (Rank() == 0) {
    std::printf("failure_loop: %d steps on %d ranks ok\n", f.steps, Size());
  }
  return 0;
}

}  // namespace
}  // namespace overlap

int main(int argc, char** argv) { return overlap::Main(argc, argv); }
