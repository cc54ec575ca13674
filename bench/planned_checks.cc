// The planned mode's launch discipline in plain MPI, to measure what its per-bucket checks cost.
//
// runtime/planes/planned_mode.cc starts each bucket of a frozen plan with a small bitwise-OR
// allreduce (the check: every rank launched the same unit) on a communicator of its own, beside
// the bucket's data allreduce; it launched bucket k + 1 only once bucket k's check was done, and
// since the evening of 2026-12-05 lets four units run ahead of their checks (--window 4). This
// program replays that pattern with nothing else: per step, `--gap-ms` of busy CPU (the
// compute), then the buckets of --sizes (float32 element counts; default the time-to-accuracy
// LM's usbyte plan, 30 buckets), each launched once the check of the bucket `--window` places
// before it is done (4 is the runtime's default, OVERLAP_PLAN_CHECK_WINDOW, 1 its old rule; 0
// launches every bucket at once, no checks), each
// MPI request spun on with MPI_Test and sched_yield as the coordinator does. It prints, per
// window, the step's communication time (first launch to last completion, the slowest rank):
//   {"window":1,"steps":300,"median_ms":..,"p90_ms":..,"max_ms":..,"slow_steps":..}
// slow_steps: steps over the median + 60 ms. Then p90 and max against --window 0's, the same
// buckets launched with no checks, as ratios.
//
//   mpirun -np 4 bazel-bin/bench/planned_checks [--steps 300] [--gap-ms 30] [--windows 0,1,2,4]
//
// On the namespace cluster (4 hosts at 250 Mbit/s, docs/time_to_accuracy.md, "auto on the LM,
// the afternoon of 2026-12-05") a window of 1 gave a median of 96 ms, a p90 of 141 and 5% of
// steps 60 ms over the median, where launching with no checks gave 89, 97 and none.
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace {

const std::vector<int> kLmUsbyteSizes = {
    256,   32768, 16384, 128, 384, 128,   128, 49152, 16384, 32768, 8192, 128, 128, 49152, 384,
    128,   128,   128,   65536, 512, 65536, 128, 128, 128,  65536, 512,  65536, 128, 128, 128};

struct Options {
  int steps = 300;
  int gap_ms = 30;
  std::vector<int> windows = {0, 1, 2, 4};
  std::vector<int> sizes = kLmUsbyteSizes;
};

[[noreturn]] void Usage(int rank, const std::string& why) {
  if (rank == 0) {
    std::fprintf(stderr,
                 "planned_checks: %s (flags: --steps N --gap-ms MS --windows LIST --sizes LIST)\n",
                 why.c_str());
  }
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

int ParseInt(int rank, const char* flag, absl::string_view text, int least) {
  int v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < least) {
    Usage(rank, std::string(flag) + " needs integers >= " + std::to_string(least));
  }
  return v;
}

std::vector<int> ParseList(int rank, const char* flag, const char* text, int least) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    out.push_back(ParseInt(rank, flag, part, least));
  }
  return out;
}

Options Parse(int argc, char** argv, int rank) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage(rank, flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--steps") {
      o.steps = ParseInt(rank, "--steps", value, 1);
    } else if (flag == "--gap-ms") {
      o.gap_ms = ParseInt(rank, "--gap-ms", value, 0);
    } else if (flag == "--windows") {
      o.windows = ParseList(rank, "--windows", value, 0);
    } else if (flag == "--sizes") {
      o.sizes = ParseList(rank, "--sizes", value, 1);
    } else {
      Usage(rank, "unknown flag " + flag);
    }
  }
  return o;
}

void Spin(double ms) {
  const double start = MPI_Wtime();
  while ((MPI_Wtime() - start) * 1e3 < ms) {
  }
}

// One step's communication time on this rank, in ms.
double Step(const Options& o, int window, MPI_Comm data, MPI_Comm checks,
            std::vector<std::vector<float>>* buffers) {
  const int n = static_cast<int>(o.sizes.size());
  std::vector<MPI_Request> data_req(n, MPI_REQUEST_NULL), check_req(n, MPI_REQUEST_NULL);
  std::vector<std::array<unsigned long long, 4>> words(n);
  std::vector<bool> data_done(n, false), check_done(n, false);
  int launched = 0, finished = 0;
  const double start = MPI_Wtime();
  while (finished < n) {
    // The runtime's rule with window w: bucket k waits for bucket k - w's check.
    while (launched < n &&
           (window == 0 || launched < window || check_done[launched - window])) {
      const int k = launched++;
      if (window > 0) {
        words[k].fill(0);
        MPI_Iallreduce(MPI_IN_PLACE, words[k].data(), 4, MPI_UNSIGNED_LONG_LONG, MPI_BOR, checks,
                       &check_req[k]);
      } else {
        check_done[k] = true;
      }
      MPI_Iallreduce(MPI_IN_PLACE, (*buffers)[k].data(), o.sizes[k], MPI_FLOAT, MPI_SUM, data,
                     &data_req[k]);
      if (window > 0) break;  // one launch per turn, as the coordinator's loop does
    }
    for (int k = 0; k < launched; ++k) {
      int flag = 0;
      if (!check_done[k]) {
        MPI_Test(&check_req[k], &flag, MPI_STATUS_IGNORE);
        if (flag) check_done[k] = true;
      }
      if (!data_done[k]) {
        MPI_Test(&data_req[k], &flag, MPI_STATUS_IGNORE);
        if (flag) {
          data_done[k] = true;
          ++finished;
        }
      }
    }
    sched_yield();
  }
  return (MPI_Wtime() - start) * 1e3;
}

struct Summary {
  double median = 0, p90 = 0, max = 0;
  int slow = 0;
};

Summary Summarize(const std::vector<double>& ms) {
  Summary s;
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  s.median = sorted[sorted.size() / 2];
  s.p90 = sorted[sorted.size() * 9 / 10];
  s.max = sorted.back();
  for (double x : ms) s.slow += x > s.median + 60 ? 1 : 0;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const Options o = Parse(argc, argv, rank);
  MPI_Comm data = MPI_COMM_NULL, checks = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &data);
  MPI_Comm_dup(MPI_COMM_WORLD, &checks);
  std::vector<std::vector<float>> buffers;
  for (int size : o.sizes) buffers.emplace_back(static_cast<size_t>(size), 1.0f);
  Summary unchecked;
  bool have_unchecked = false;
  for (int window : o.windows) {
    std::vector<double> steps;
    for (int s = 0; s < o.steps; ++s) {
      Spin(o.gap_ms);
      double mine = Step(o, window, data, checks, &buffers);
      double slowest = 0;
      MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      steps.push_back(slowest);
    }
    const Summary s = Summarize(steps);
    if (window == 0) {
      unchecked = s;
      have_unchecked = true;
    }
    if (rank == 0) {
      std::printf(
          "{\"window\":%d,\"steps\":%d,\"gap_ms\":%d,\"buckets\":%zu,\"median_ms\":%.2f,"
          "\"p90_ms\":%.2f,\"max_ms\":%.2f,\"slow_steps\":%d",
          window, o.steps, o.gap_ms, o.sizes.size(), s.median, s.p90, s.max, s.slow);
      if (have_unchecked && window > 0) {
        std::printf(",\"p90_vs_unchecked\":%.2f,\"max_vs_unchecked\":%.2f", s.p90 / unchecked.p90,
                    s.max / unchecked.max);
      }
      std::printf("}\n");
      std::fflush(stdout);
    }
  }
  MPI_Comm_free(&checks);
  MPI_Comm_free(&data);
  MPI_Finalize();
  return 0;
}
