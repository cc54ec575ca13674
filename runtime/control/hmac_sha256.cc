#include "runtime/control/hmac_sha256.h"

#include <cstring>

namespace overlap {
namespace {

constexpr std::array<uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

}  // namespace

Sha256::Sha256()
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
             0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::Compress(const uint8_t* block) {
  std::array<uint32_t, 64> w;
  for (int i = 0; i < 16; ++i) {
    w[i] = static_cast<uint32_t>(block[4 * i]) << 24 |
           static_cast<uint32_t>(block[4 * i + 1]) << 16 |
           static_cast<uint32_t>(block[4 * i + 2]) << 8 | static_cast<uint32_t>(block[4 * i + 3]);
  }
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t t1 =
        h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
    const uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::Update(absl::Span<const uint8_t> data) {
  length_ += data.size();
  size_t at = 0;
  while (at < data.size()) {
    const size_t take = std::min(data.size() - at, block_.size() - filled_);
    std::memcpy(block_.data() + filled_, data.data() + at, take);
    filled_ += take;
    at += take;
    if (filled_ == block_.size()) {
      Compress(block_.data());
      filled_ = 0;
    }
  }
}

void Sha256::Update(absl::string_view data) {
  Update(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
}

Sha256Digest Sha256::Finish() {
  const uint64_t bits = length_ * 8;
  // The padding: a one bit, zeros up to 56 bytes into a block, then the length, big-endian.
  std::array<uint8_t, 72> pad{};
  pad[0] = 0x80;
  const size_t zeros = (filled_ < 56 ? 56 - filled_ : 120 - filled_);
  for (int i = 0; i < 8; ++i)
    pad[zeros + static_cast<size_t>(i)] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  Update(absl::MakeConstSpan(pad.data(), zeros + 8));
  Sha256Digest out;
  for (size_t i = 0; i < 8; ++i) {
    for (size_t k = 0; k < 4; ++k) out[4 * i + k] = static_cast<uint8_t>(state_[i] >> (24 - 8 * k));
  }
  return out;
}

Sha256Digest Sha256Of(absl::Span<const uint8_t> data) {
  Sha256 hash;
  hash.Update(data);
  return hash.Finish();
}

Sha256Digest HmacSha256(absl::Span<const uint8_t> key,
                        std::initializer_list<absl::Span<const uint8_t>> parts) {
  std::array<uint8_t, 64> block{};
  if (key.size() > block.size()) {
    const Sha256Digest short_key = Sha256Of(key);
    std::memcpy(block.data(), short_key.data(), short_key.size());
  } else if (!key.empty()) {
    std::memcpy(block.data(), key.data(), key.size());
  }
  std::array<uint8_t, 64> pad;
  for (size_t i = 0; i < pad.size(); ++i) pad[i] = block[i] ^ 0x36;
  Sha256 inner;
  inner.Update(pad);
  for (absl::Span<const uint8_t> part : parts) inner.Update(part);
  const Sha256Digest inner_digest = inner.Finish();
  for (size_t i = 0; i < pad.size(); ++i) pad[i] = block[i] ^ 0x5c;
  Sha256 outer;
  outer.Update(pad);
  outer.Update(inner_digest);
  return outer.Finish();
}

bool MacEqual(absl::Span<const uint8_t> a, absl::Span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = diff | (a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace overlap
