// Compression throughput against memcpy, measured in the same run.
//
//   bazel-bin/bench/compression [--json] [--sizes=262144,4194304,67108864] [--compressors=a;b]
//
// For each input size (bytes of float32 gradient) memcpy of that many bytes is timed first, then
// each compressor's sender-side work per step: Compress (which also updates the residual), plus
// NextRound for PowerSGD. gbps = input bytes / time; ratio_vs_memcpy = gbps / memcpy_gbps;
// wire_ratio = payload bytes on the wire per rank / input bytes (averaged over covap's R phases,
// both rounds for PowerSGD). Each figure is the best of several ~25 ms batches, which filters out
// the noise of a shared machine. With --json every row is one JSON object on its own line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_split.h"
#include "compression/compressor.h"
#include "compression/kernels/cpu.h"

namespace overlap {
namespace compress {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kBatches = 5;
constexpr double kBatchSeconds = 0.025;

// Seconds per call of `f` (best batch); f(i) gets a running iteration number.
template <typename F>
double TimePerCall(F f) {
  int64_t iter = 0;
  f(iter++);  // warm-up: page in buffers, size scratch vectors
  // Size a batch so it lasts about kBatchSeconds.
  int64_t calls = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < calls; ++i) f(iter++);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s >= kBatchSeconds / 4 || calls > (1 << 20)) {
      calls = std::max<int64_t>(1, static_cast<int64_t>(calls * kBatchSeconds / std::max(s, 1e-9)));
      break;
    }
    calls *= 4;
  }
  double best = 1e30;
  for (int b = 0; b < kBatches; ++b) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < calls; ++i) f(iter++);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / calls);
  }
  return best;
}

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

double MemcpyGbps(size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const double s = TimePerCall([&](int64_t i) {
    src[0] = static_cast<char>(i);  // keep the copy from being hoisted
    std::memcpy(dst.data(), src.data(), bytes);
  });
  if (dst[0] == 42) std::printf(" ");
  return bytes / s / 1e9;
}

// Returns {gbps, wire_ratio}, or gbps < 0 with a message when the compressor cannot run.
std::pair<double, double> Measure(const Compressor& c, size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> grad(n);
  for (float& x : grad) x = dist(rng);
  const size_t cap = c.MaxPayloadBytes(n).value();
  std::vector<uint32_t> p0(cap / 4 + 1), p1(cap / 4 + 1);
  absl::Span<uint8_t> payload0(reinterpret_cast<uint8_t*>(p0.data()), p0.size() * 4);
  absl::Span<uint8_t> payload1(reinterpret_cast<uint8_t*>(p1.data()), p1.size() * 4);
  ResidualState state(1, n);
  double wire_bytes = 0;
  int64_t wire_steps = 0;
  const double s = TimePerCall([&](int64_t step) {
    size_t bytes = c.Compress(grad, state, step, payload0).value();
    if (c.rounds() == 2) {
      // The summed P of one rank is its own P.
      bytes += c.NextRound(1, payload0, state, step, payload1).value();
    }
    wire_bytes += static_cast<double>(bytes);
    ++wire_steps;
  });
  return {n * sizeof(float) / s / 1e9, wire_bytes / wire_steps / (n * sizeof(float))};
}

int Main(int argc, char** argv) {
  bool json = false;
  std::vector<size_t> sizes = {size_t{256} << 10, size_t{4} << 20, size_t{64} << 20};
  std::vector<std::string> specs = {"none",
                                    "fp16",
                                    "bf16",
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
    std::printf("# cpu path: %s\n", kernels::IsaName(kernels::BestIsa()));
    std::printf("%-34s %11s %9s %9s %7s %9s\n", "compressor", "bytes", "gbps", "memcpy", "ratio",
                "wire");
  }
  for (size_t bytes : sizes) {
    const size_t n = bytes / sizeof(float);
    const double memcpy_gbps = MemcpyGbps(n * sizeof(float));
    for (const std::string& spec : specs) {
      auto c = MakeCompressor(spec);
      if (!c.ok()) {
        std::fprintf(stderr, "%s: %s\n", spec.c_str(), std::string(c.status().message()).c_str());
        return 1;
      }
      const auto [gbps, wire] = Measure(**c, n);
      Print({spec, n * sizeof(float), gbps, memcpy_gbps, wire}, json);
    }
  }
  return 0;
}

}  // namespace
}  // namespace compress
}  // namespace overlap

int main(int argc, char** argv) { return overlap::compress::Main(argc, argv); }
