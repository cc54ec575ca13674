// Allreduce throughput of the overlap runtime against raw MPI_Allreduce, in one run.
//
//   mpirun -np 4 bazel-bin/bench/allreduce [--json] [--trials N] [--max-bytes B]
//
// Case "size": one tensor of B bytes (fp32, sum, in place), 4 KiB to 256 MiB in steps of 4x. The
// runtime and MPI_Allreduce (on MPI_COMM_WORLD, MPI_IN_PLACE) reduce the same buffer. Each
// trial is a barrier followed by `iters` back-to-back operations; its time is the slowest rank's
// mean per operation. Trials of the two interleave (rotating which goes first) so that load from
// other processes on a shared machine hits both alike. Times are the median trial (or with --best
// the fastest); the ratio is the median of the per-trial ratios (paired: a trial of each method
// run back to back shares the machine's state, which on a shared machine drifts by more than the
// difference being measured), or with --best the ratio of the fastest trials.
// Before timing, each case runs long enough for the runtime to freeze its plan
// (OVERLAP_PLAN_AFTER_STEPS) and for the adaptive allreduce to settle its verdict
// (OVERLAP_ADAPTIVE_ALLREDUCE), as a training job's first iterations do; "planned" in the output
// says whether the timed operations ran on a plan.
// GB/s is algorithm bandwidth, bytes / time / 1e9 (bus bandwidth is 2(n-1)/n times that).
//
// Case "resnet50_step": ResNet-50's 161 gradients (bench/resnet50_tensors.h), each in its own
// allocation, submitted one by one in backward order as one step and all waited for, against one
// hand-fused MPI_Allreduce of the same total bytes. Median (or best) over interleaved trials.
//
// Sum rather than average on both sides, so neither pays for a division the other skips.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/job.h"
#include "bench/resnet50_tensors.h"
#include "runtime/overlap.h"

namespace overlap {
namespace bench {
namespace {

enum class Statistic { kMedian, kBest };

struct BenchOptions {
  bool json = false;
  int trials = 9;
  Statistic statistic = Statistic::kMedian;
  int64_t min_bytes = int64_t{4} << 10;
  int64_t max_bytes = int64_t{256} << 20;
  bool resnet50 = true;
};

// Every failure ends the whole job: a rank that stopped would leave the others in a barrier.
constexpr char kProgram[] = "bench/allreduce";

[[noreturn]] void Die(const std::string& message) { AbortJob(kProgram, message); }
void Check(const absl::Status& status) { CheckOrAbort(kProgram, status); }

absl::StatusOr<BenchOptions> ParseFlags(int argc, char** argv) {
  BenchOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next_int = [&](int64_t min, int64_t* out) -> absl::Status {
      if (i + 1 >= argc || !absl::SimpleAtoi(argv[i + 1], out) || *out < min) {
        return absl::InvalidArgumentError(absl::StrCat("flag ", arg, " needs an integer >= ", min));
      }
      ++i;
      return absl::OkStatus();
    };
    absl::Status status;
    int64_t n = 0;
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--best") {
      options.statistic = Statistic::kBest;
    } else if (arg == "--no-resnet50") {
      options.resnet50 = false;
    } else if (arg == "--trials") {
      status = next_int(1, &n);
      options.trials = static_cast<int>(n);
    } else if (arg == "--min-bytes") {
      status = next_int(4, &options.min_bytes);
    } else if (arg == "--max-bytes") {
      status = next_int(4, &options.max_bytes);
    } else {
      status = absl::InvalidArgumentError(absl::StrCat(
          "unknown argument ", arg,
          " (flags: --json --best --trials N --min-bytes B --max-bytes B --no-resnet50)"));
    }
    if (!status.ok()) {
      return status;
    }
  }
  return options;
}

double MaxOverRanks(double value) {
  double max = 0.0;
  MPI_Allreduce(&value, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return max;
}

// The median trial, or the fastest one: load from other processes only ever adds time, so on a
// shared machine the best trial is the closest to what the code itself costs.
double Summarise(std::vector<double> values, Statistic statistic) {
  std::sort(values.begin(), values.end());
  if (statistic == Statistic::kBest) {
    return values.front();
  }
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

AllreduceOptions SumOptions() {
  AllreduceOptions options;
  options.op = ReduceOp::kSum;
  return options;
}

// Seconds per operation of `iters` back-to-back runtime allreduces, slowest rank.
double TimeOverlap(const std::string& name, const Tensor& tensor, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    absl::StatusOr<Handle> handle = Allreduce(name, tensor, tensor, SumOptions());
    if (!handle.ok()) {
      Die(handle.status().ToString());
    }
    Check(handle->Wait());
  }
  return MaxOverRanks((MPI_Wtime() - start) / iters);
}

// The executor's floor: the non-blocking MPI_Iallreduce the runtime's MPI executor issues,
// waited on at once from this thread (no negotiation, no coordinator thread). Shown in the
// readable table only, to tell the runtime's own costs from those of non-blocking MPI.
double TimeMpiNonBlocking(float* data, int64_t count, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    MPI_Request request;
    if (MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                       MPI_COMM_WORLD, &request) != MPI_SUCCESS ||
        MPI_Wait(&request, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      Die("MPI_Iallreduce failed");
    }
  }
  return MaxOverRanks((MPI_Wtime() - start) / iters);
}

double TimeMpi(float* data, int64_t count, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    if (MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD) != MPI_SUCCESS) {
      Die("MPI_Allreduce failed");
    }
  }
  return MaxOverRanks((MPI_Wtime() - start) / iters);
}

struct Measured {
  std::vector<double> summary;              // per method, over the trials
  std::vector<std::vector<double>> trials;  // per method, per trial
};

// Runs every measurement once per trial, rotating which goes first so that no method always
// follows another; returns each one's trials and summary.
Measured Interleaved(const BenchOptions& options,
                     const std::vector<std::function<double()>>& measures) {
  Measured out;
  out.trials.resize(measures.size());
  for (int t = 0; t < options.trials; ++t) {
    for (size_t k = 0; k < measures.size(); ++k) {
      const size_t m = (t + k) % measures.size();
      out.trials[m].push_back(measures[m]());
    }
  }
  for (const std::vector<double>& t : out.trials) {
    out.summary.push_back(Summarise(t, options.statistic));
  }
  return out;
}

// Time of method b over time of method a: the median of the per-trial ratios, or with --best the
// ratio of the fastest trials.
double TimeRatio(const BenchOptions& options, const Measured& m, size_t a, size_t b) {
  if (options.statistic == Statistic::kBest) return m.summary[b] / m.summary[a];
  std::vector<double> ratios;
  for (size_t t = 0; t < m.trials[a].size(); ++t) ratios.push_back(m.trials[b][t] / m.trials[a][t]);
  return Summarise(ratios, Statistic::kMedian);
}

bool Planned() { return Stats().planned_tensors > 0; }

// Before timing a size, one sum of (rank + 1) through the runtime must give n(n+1)/2 everywhere:
// a fast wrong answer is not a result.
void VerifySum(const std::string& name, std::vector<float>& buffer, const Tensor& tensor) {
  std::fill(buffer.begin(), buffer.end(), static_cast<float>(Rank() + 1));
  absl::StatusOr<Handle> handle = Allreduce(name, tensor, tensor, SumOptions());
  if (!handle.ok()) {
    Die(handle.status().ToString());
  }
  Check(handle->Wait());
  const float want = Size() * (Size() + 1) / 2.0f;
  for (size_t i : {size_t{0}, buffer.size() / 2, buffer.size() - 1}) {
    if (buffer[i] != want) {
      Die(absl::StrCat("allreduce '", name, "' gave ", buffer[i], " at element ", i, ", expected ",
                       want));
    }
  }
  // Zeros from here on: repeated in-place sums of zero never overflow or turn denormal, so every
  // trial does the same arithmetic.
  std::fill(buffer.begin(), buffer.end(), 0.0f);
}

void RunSize(const BenchOptions& options, int64_t bytes) {
  const int64_t count = bytes / static_cast<int64_t>(sizeof(float));
  std::vector<float> buffer(count);
  const Tensor tensor = MakeTensor(buffer.data(), {count});
  const std::string name = absl::StrCat("bench.size.", bytes);
  VerifySum(name, buffer, tensor);
  // Enough back-to-back operations that a trial of a small size is not one timer tick.
  const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{8} << 20) / bytes, 1, 50));
  // Warm-up: negotiation, caches, then the plan freezes, and the planned executor's first two
  // link probes (OVERLAP_ADAPTIVE_ALLREDUCE) have agreed on a verdict.
  TimeOverlap(name, tensor, 12);
  TimeMpi(buffer.data(), count, 1);
  std::vector<std::function<double()>> measures = {
      [&] { return TimeOverlap(name, tensor, iters); },
      [&] { return TimeMpi(buffer.data(), count, iters); }};
  if (!options.json) {
    TimeMpiNonBlocking(buffer.data(), count, 1);
    measures.push_back([&] { return TimeMpiNonBlocking(buffer.data(), count, iters); });
  }
  const Measured measured = Interleaved(options, measures);
  const std::vector<double>& seconds = measured.summary;
  const double overlap_s = seconds[0];
  const double mpi_s = seconds[1];
  const double overlap_gbps = bytes / overlap_s / 1e9;
  const double mpi_gbps = bytes / mpi_s / 1e9;
  const double ratio = TimeRatio(options, measured, 0, 1);  // overlap GB/s over MPI GB/s
  const bool planned = Planned();
  if (Rank() != 0) {
    return;
  }
  // The adaptive allreduce's verdict (OVERLAP_ADAPTIVE_ALLREDUCE): host names are the cluster's
  // own, plain words.
  const RuntimeStats stats = Stats();
  if (options.json) {
    std::printf(
        "{\"case\":\"size\",\"bytes\":%lld,\"ranks\":%d,\"overlap_gbps\":%.4f,"
        "\"mpi_gbps\":%.4f,\"ratio\":%.4f,\"planned\":%s,\"weighted_allreduces\":%lld,"
        "\"link_rates\":\"%s\"}\n",
        static_cast<long long>(bytes), Size(), overlap_gbps, mpi_gbps, ratio,
        planned ? "true" : "false", static_cast<long long>(stats.weighted_allreduces),
        stats.link_rates.c_str());
  } else {
    std::printf("%12lld %6d %12.1f %12.1f %12.1f %12.3f %10.3f %7.3f %s\n",
                static_cast<long long>(bytes), Size(), overlap_s * 1e6, mpi_s * 1e6,
                seconds[2] * 1e6, overlap_gbps, mpi_gbps, ratio, planned ? "planned" : "");
  }
  std::fflush(stdout);
}

// One training step's worth of ResNet-50 gradients through the runtime, slowest rank, seconds.
double TimeResNetStep(std::vector<std::vector<float>>& grads) {
  std::vector<Handle> handles;
  handles.reserve(grads.size());
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int p = static_cast<int>(grads.size()) - 1; p >= 0; --p) {
    const Tensor tensor = MakeTensor(grads[p].data(), {static_cast<int64_t>(grads[p].size())});
    absl::StatusOr<Handle> handle =
        Allreduce(kResNet50Parameters[p].name, tensor, tensor, SumOptions());
    if (!handle.ok()) {
      Die(handle.status().ToString());
    }
    handles.push_back(*handle);
  }
  for (const Handle& handle : handles) {
    Check(handle.Wait());
  }
  return MaxOverRanks(MPI_Wtime() - start);
}

void RunResNet50(const BenchOptions& options) {
  std::vector<std::vector<float>> grads;
  grads.reserve(kResNet50Parameters.size());
  for (const ParameterShape& p : kResNet50Parameters) {
    grads.emplace_back(p.NumElements(), 0.0f);
  }
  std::vector<float> fused(kResNet50TotalElements, 0.0f);
  // The first step negotiates every tensor, the next ones hit the cache, then the plan freezes.
  for (int warm = 0; warm < 5; ++warm) TimeResNetStep(grads);
  TimeMpi(fused.data(), kResNet50TotalElements, 1);
  const Measured measured =
      Interleaved(options, {[&] { return TimeResNetStep(grads); },
                            [&] { return TimeMpi(fused.data(), kResNet50TotalElements, 1); }});
  const double overlap_s = measured.summary[0];
  const double mpi_s = measured.summary[1];
  const double ratio = TimeRatio(options, measured, 1, 0);  // overlap time over MPI time
  const bool planned = Planned();
  if (Rank() != 0) {
    return;
  }
  if (options.json) {
    std::printf(
        "{\"case\":\"resnet50_step\",\"overlap_ms\":%.3f,\"mpi_fused_ms\":%.3f,"
        "\"ratio\":%.4f,\"planned\":%s}\n",
        overlap_s * 1e3, mpi_s * 1e3, ratio, planned ? "true" : "false");
  } else {
    std::printf(
        "\nresnet50_step: %zu tensors, %lld bytes, %d ranks: overlap %.3f ms, "
        "one fused MPI_Allreduce %.3f ms, ratio %.3f (lower is better)%s\n",
        kResNet50Parameters.size(),
        static_cast<long long>(kResNet50TotalElements) * static_cast<long long>(sizeof(float)),
        Size(), overlap_s * 1e3, mpi_s * 1e3, ratio, planned ? ", planned" : "");
  }
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  // The runtime's coordinator thread and this thread's raw MPI calls run concurrently.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    Die("MPI does not provide MPI_THREAD_MULTIPLE");
  }
  absl::StatusOr<BenchOptions> options = ParseFlags(argc, argv);
  if (!options.ok()) {
    Die(std::string(options.status().message()));
  }
  Check(Init());
  if (Rank() == 0 && !options->json) {
    std::printf("fp32 sum allreduce, %d ranks; %s of %d interleaved trials, slowest rank\n", Size(),
                options->statistic == Statistic::kBest ? "best" : "median", options->trials);
    std::printf("%12s %6s %12s %12s %12s %12s %10s %7s\n", "bytes", "ranks", "overlap_us", "mpi_us",
                "mpi_nb_us", "overlap_GB/s", "mpi_GB/s", "ratio");
  }
  for (int64_t bytes = options->min_bytes; bytes <= options->max_bytes; bytes *= 4) {
    RunSize(*options, bytes);
  }
  if (options->resnet50) {
    RunResNet50(*options);
  }
  return FinishJob(kProgram, 0);
}

}  // namespace
}  // namespace bench
}  // namespace overlap

int main(int argc, char** argv) { return overlap::bench::Main(argc, argv); }
