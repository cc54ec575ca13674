// Counter-based randomness that every rank reproduces without communication: a value depends
// only on (seed, tensor id, step, counter). Used by randomk's indices and PowerSGD's initial Q.
#ifndef OVERLAP_COMPRESSION_SHARED_RANDOM_H_
#define OVERLAP_COMPRESSION_SHARED_RANDOM_H_

#include <cstdint>

namespace overlap {
namespace compress {

// SplitMix64's finaliser: a bijective mix with good avalanche, cheap enough per element.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The stream key of one (seed, tensor, step); draw i is Mix64(key + i).
inline uint64_t StreamKey(uint64_t seed, int64_t tensor_id, int64_t step) {
  return Mix64(Mix64(Mix64(seed) ^ static_cast<uint64_t>(tensor_id)) ^ static_cast<uint64_t>(step));
}

// Uniform in [0, bound) from the high bits (Lemire's multiply-shift; bound < 2^32).
inline uint32_t Below(uint64_t random, uint32_t bound) {
  return static_cast<uint32_t>(((random >> 32) * static_cast<uint64_t>(bound)) >> 32);
}

// Uniform in [-1, 1).
inline float SignedUnit(uint64_t random) {
  return static_cast<float>(static_cast<int64_t>(random) >> 40) * (1.0f / 8388608.0f);
}

}  // namespace compress
}  // namespace overlap

#endif  // OVERLAP_COMPRESSION_SHARED_RANDOM_H_
