// Helpers shared by the compression tests: deterministic gradients and an in-process stand-in
// for the executor (compress on every simulated rank, combine, decompress).
#ifndef OVERLAP_TESTS_COMPRESSION_TEST_UTIL_H_
#define OVERLAP_TESTS_COMPRESSION_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compression/compressor.h"

namespace overlap {
namespace compress {
namespace testing {

// Gradients on the dyadic grid k * 2^-8 with |k| <= 2048: sums of a few dozen of them are exact
// in float, so any mismatch in sent + residual == sum of gradients is the compressor's fault.
inline std::vector<float> DyadicGradient(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-2048, 2048);
  std::vector<float> g(n);
  for (float& x : g) x = static_cast<float>(dist(rng)) / 256.0f;
  return g;
}

inline std::vector<float> GaussianGradient(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> g(n);
  for (float& x : g) x = dist(rng);
  return g;
}

// A 4-byte aligned payload buffer.
struct Payload {
  explicit Payload(size_t bytes) : words((bytes + 3) / 4 + 1, 0) {}
  absl::Span<uint8_t> span() {
    return absl::MakeSpan(reinterpret_cast<uint8_t*>(words.data()), words.size() * 4);
  }
  std::vector<uint32_t> words;
};

// What one compressed step decodes to on one rank, driven like the executor does with a single
// rank (the "combined" payload is this rank's own).
inline std::vector<float> RunStep(const Compressor& c, absl::Span<const float> grad,
                                  ResidualState& state, int64_t step) {
  const size_t cap = c.MaxPayloadBytes(grad.size()).value();
  Payload round0(cap), round1(cap);
  size_t bytes = c.Compress(grad, state, step, round0.span()).value();
  Payload* last = &round0;
  if (c.rounds() == 2) {
    bytes = c.NextRound(1, round0.span().subspan(0, bytes), state, step, round1.span()).value();
    last = &round1;
  }
  std::vector<float> out(grad.size(), -1.0f);
  const absl::Status s = c.Decompress(last->span(), state, step, absl::MakeSpan(out));
  if (!s.ok()) throw std::runtime_error(std::string(s.message()));
  return out;
}

}  // namespace testing
}  // namespace compress
}  // namespace overlap

#endif  // OVERLAP_TESTS_COMPRESSION_TEST_UTIL_H_
