// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the control plane's handshake
// (control_handshake.h). Small and self-contained so that the runtime needs no crypto library;
// it is not constant-time against cache-timing attacks on the key schedule, which a peer that
// only sees a MAC over the network cannot mount. MacEqual is the comparison to check a MAC with.
#ifndef OVERLAP_RUNTIME_CONTROL_HMAC_SHA256_H_
#define OVERLAP_RUNTIME_CONTROL_HMAC_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace overlap {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental SHA-256: Update any number of times, then Finish once.
class Sha256 {
 public:
  Sha256();
  void Update(absl::Span<const uint8_t> data);
  void Update(absl::string_view data);
  Sha256Digest Finish();

 private:
  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> block_{};
  size_t filled_ = 0;    // bytes of block_ in use
  uint64_t length_ = 0;  // bytes hashed so far
};

Sha256Digest Sha256Of(absl::Span<const uint8_t> data);

// HMAC-SHA256 of the concatenation of `parts` under `key` (a key longer than 64 bytes is hashed
// first, as RFC 2104 says).
Sha256Digest HmacSha256(absl::Span<const uint8_t> key,
                        std::initializer_list<absl::Span<const uint8_t>> parts);

// Whether a and b are equal, in a time that depends only on their size: a peer timing the
// answer learns nothing about how many leading bytes of its guess were right.
bool MacEqual(absl::Span<const uint8_t> a, absl::Span<const uint8_t> b);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CONTROL_HMAC_SHA256_H_
