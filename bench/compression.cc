// Compression throughput against memcpy, measured in the same run.
//
//   bazel-bin/bench/compression [--json] [--sizes=262144,4194304,67108864] [--compressors=a;b]
//
// For each input size (bytes of float32 gradient) memcpy of that many bytes is timed first, then
// each compressor's sender-side work per step: Compress (which also updates the residual), plus
// NextRound for PowerSGD. gbps = input bytes / time; ratio_vs_memcpy = gbps / memcpy_gbps;
// wire_ratio = payload bytes on the wire per rank / input bytes (averaged over covap's R phases,
// both rounds for PowerSGD). Batches (~20 ms) of memcpy and of the compressor alternate and each
// side keeps its fastest batch, so the ratio holds up on a loaded machine. With --json every row
// is one JSON object on its own line.
//
// Rows "mpi-sum:fp16" and "mpi-sum:bf16" (with ":scalar" for the scalar loop) time the other end
// of a compressed allreduce: MPI's sum of one rank's fp16/bf16 payload into another's
// (collectives/mpi_executor.cc), gbps again per byte of the float32 gradient.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "numeric/half.h"
#include "compression/compressor.h"
#include "numeric/cpu_kernels.h"

namespace overlap {
namespace compress {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kRounds = 7;
constexpr double kBatchSeconds = 0.02;

// Times batches of calls to one function. Batches of memcpy and of each compressor alternate,
// and each keeps its fastest batch, so load from other processes on a shared machine hits both
// sides of the ratio alike instead of whichever ran during a burst.
class Timer {
 public:
  explicit Timer(std::function<void(int64_t)> f) : f_(std::move(f)) {
    f_(iter_++);  // warm-up: page in buffers, size scratch vectors
    for (calls_ = 1;; calls_ *= 4) {
      const double s = Batch();
      if (s * calls_ >= kBatchSeconds / 4 || calls_ > (1 << 20)) {
        calls_ = std::max<int64_t>(1, static_cast<int64_t>(kBatchSeconds / std::max(s, 1e-9)));
        break;
      }
    }
  }

  // Runs one batch; returns seconds per call and keeps the best.
  double Batch() {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < calls_; ++i) f_(iter_++);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count() / calls_;
    best_ = std::min(best_, s);
    return s;
  }

  double best() const { return best_; }

 private:
  std::function<void(int64_t)> f_;
  int64_t iter_ = 0;
  int64_t calls_ = 1;
  double best_ = 1e30;
};

struct Row {
  std::string compressor;
  size_t bytes;
  double gbps, memcpy_gbps, wire_ratio;
};

void Print(const Row& row, bool json) {
  const double ratio = row.gbps / row.memcpy_gbps;
  if (json) {
    std::printf(
        "{\"compressor\":\"%s\",\"bytes\":%zu,\"gbps\":%.3f,\"memcpy_gbps\":%.3f,"
        "\"ratio_vs_memcpy\":%.3f,\"wire_ratio\":%.5f}\n",
        row.compressor.c_str(), row.bytes, row.gbps, row.memcpy_gbps, ratio, row.wire_ratio);
  } else {
    std::printf("%-34s %11zu %9.2f %9.2f %7.3f %9.5f\n", row.compressor.c_str(), row.bytes,
                row.gbps, row.memcpy_gbps, ratio, row.wire_ratio);
  }
  std::fflush(stdout);
}

// One compressor's sender-side step on a fixed gradient, with its own residual and payloads.
class CompressorCase {
 public:
  CompressorCase(const Compressor& c, size_t n) : c_(c), grad_(n), state_(1, n) {
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& x : grad_) x = dist(rng);
    const size_t cap = c.MaxPayloadBytes(n).value();
    p0_.resize(cap / 4 + 1);
    p1_.resize(cap / 4 + 1);
  }

  void Step(int64_t step) {
    absl::Span<uint8_t> payload0(reinterpret_cast<uint8_t*>(p0_.data()), p0_.size() * 4);
    absl::Span<uint8_t> payload1(reinterpret_cast<uint8_t*>(p1_.data()), p1_.size() * 4);
    size_t bytes = c_.Compress(grad_, state_, step, payload0).value();
    if (c_.rounds() == 2) bytes += c_.NextRound(1, payload0, state_, step, payload1).value();
    wire_bytes_ += static_cast<double>(bytes);
    ++steps_;
  }

  double wire_ratio() const { return wire_bytes_ / steps_ / (grad_.size() * sizeof(float)); }

 private:
  const Compressor& c_;
  std::vector<float> grad_;
  ResidualState state_;
  std::vector<uint32_t> p0_, p1_;
  double wire_bytes_ = 0;
  int64_t steps_ = 0;
};

int Main(int argc, char** argv) {
  bool json = false;
  std::vector<size_t> sizes = {size_t{256} << 10, size_t{4} << 20, size_t{64} << 20};
  std::vector<std::string> specs = {"none",
                                    "fp16",
                                    "bf16",
                                    "fp16:ef=0",
                                    "bf16:ef=0",
                                    "covap:R=4",
                                    "randomk:ratio=0.01",
                                    "topk:ratio=0.01,method=sampled",
                                    "topk:ratio=0.01,method=exact",
                                    "efsign",
                                    "powersgd:rank=4"};
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (absl::ConsumePrefix(&arg, "--sizes=")) {
      sizes.clear();
      for (absl::string_view s : absl::StrSplit(arg, ',')) {
        size_t v;
        if (!absl::SimpleAtoi(s, &v) || v < 4) {
          std::fprintf(stderr, "bad size '%s' in --sizes\n", std::string(s).c_str());
          return 2;
        }
        sizes.push_back(v);
      }
    } else if (absl::ConsumePrefix(&arg, "--compressors=")) {
      specs = absl::StrSplit(arg, ';');
    } else {
      std::fprintf(stderr, "usage: %s [--json] [--sizes=b1,b2,...] [--compressors=spec;spec]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!json) {
    std::printf("# cpu path: %s\n", numeric::IsaName(numeric::BestIsa()));
    std::printf("%-34s %11s %9s %9s %7s %9s\n", "compressor", "bytes", "gbps", "memcpy", "ratio",
                "wire");
  }
  for (size_t bytes : sizes) {
    const size_t n = bytes / sizeof(float);
    std::vector<char> src(n * sizeof(float), 1), dst(n * sizeof(float), 0);
    Timer memcpy_timer([&](int64_t i) {
      src[i % src.size()] = static_cast<char>(i);  // a fresh source each call
      std::memcpy(dst.data(), src.data(), src.size());
    });
    std::vector<Row> rows;
    for (const std::string& spec : specs) {
      auto c = MakeCompressor(spec);
      if (!c.ok()) {
        std::fprintf(stderr, "%s: %s\n", spec.c_str(), std::string(c.status().message()).c_str());
        return 1;
      }
      CompressorCase run(**c, n);
      Timer timer([&](int64_t step) { run.Step(step); });
      for (int r = 0; r < kRounds; ++r) {
        memcpy_timer.Batch();
        timer.Batch();
      }
      rows.push_back(
          {spec, n * sizeof(float), n * sizeof(float) / timer.best() / 1e9, 0, run.wire_ratio()});
    }
    for (const bool bf16 : {false, true}) {
      // Payloads that add and then take away, so the sums stay finite however many calls run.
      std::vector<uint16_t> plus(n), minus(n), acc(n);
      std::mt19937 gen(7);
      std::normal_distribution<float> normal(0.0f, 1e-2f);
      for (size_t i = 0; i < n; ++i) {
        const float v = normal(gen);
        plus[i] = bf16 ? FloatToBFloat16(v) : FloatToHalf(v);
        minus[i] = bf16 ? FloatToBFloat16(-v) : FloatToHalf(-v);
        acc[i] = bf16 ? FloatToBFloat16(1.0f) : FloatToHalf(1.0f);
      }
      std::vector<numeric::Isa> paths = {numeric::Isa::kScalar};
      if (numeric::BestIsa() != numeric::Isa::kScalar) paths.push_back(numeric::BestIsa());
      for (const numeric::Isa isa : paths) {
        Timer timer([&](int64_t step) {
          const absl::Span<const uint16_t> in = step % 2 == 0 ? plus : minus;
          if (bf16) {
            numeric::BFloat16Sum(in, absl::MakeSpan(acc), isa);
          } else {
            numeric::HalfSum(in, absl::MakeSpan(acc), isa);
          }
        });
        for (int r = 0; r < kRounds; ++r) {
          memcpy_timer.Batch();
          timer.Batch();
        }
        const std::string name = std::string("mpi-sum:") + (bf16 ? "bf16" : "fp16") +
                                 (isa == numeric::Isa::kScalar ? ":scalar" : "");
        rows.push_back({name, n * sizeof(float), n * sizeof(float) / timer.best() / 1e9, 0, 0.5});
      }
    }
    // memcpy's best over every round at this size: the baseline for all its rows.
    for (Row& row : rows) {
      row.memcpy_gbps = n * sizeof(float) / memcpy_timer.best() / 1e9;
      Print(row, json);
    }
  }
  return 0;
}

}  // namespace
}  // namespace compress
}  // namespace overlap

int main(int argc, char** argv) { return overlap::compress::Main(argc, argv); }
