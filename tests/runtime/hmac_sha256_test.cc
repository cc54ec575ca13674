// SHA-256 and HMAC-SHA256 (runtime/control/hmac_sha256.h) against the published test vectors: FIPS 180-2
// appendix B for SHA-256, RFC 4231 section 4 for HMAC-SHA256.
#include "runtime/control/hmac_sha256.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"

namespace overlap {
namespace {

std::vector<uint8_t> Of(const std::string& text) { return {text.begin(), text.end()}; }

std::string Hex(const Sha256Digest& digest) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

std::string Hmac(const std::vector<uint8_t>& key, const std::vector<uint8_t>& data) {
  return Hex(HmacSha256(key, {data}));
}

TEST_CASE("SHA-256 matches FIPS 180-2's examples") {
  CHECK(Hex(Sha256Of(Of(""))) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Hex(Sha256Of(Of("abc"))) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(Hex(Sha256Of(Of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(Hex(Sha256Of(std::vector<uint8_t>(1000000, 'a'))) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("SHA-256 gives the same digest however the input is split") {
  const std::vector<uint8_t> data(1000, 'x');
  const Sha256Digest whole = Sha256Of(data);
  for (size_t first : {0, 1, 55, 56, 63, 64, 65, 999}) {
    Sha256 hash;
    hash.Update(absl::MakeConstSpan(data).subspan(0, first));
    hash.Update(absl::MakeConstSpan(data).subspan(first));
    CHECK(hash.Finish() == whole);
  }
}

TEST_CASE("HMAC-SHA256 matches RFC 4231's test cases") {
  // Test case 1: a 20-byte key.
  CHECK(Hmac(std::vector<uint8_t>(20, 0x0b), Of("Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the output.
  CHECK(Hmac(Of("Jefe"), Of("what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3: 50 bytes of 0xdd.
  CHECK(Hmac(std::vector<uint8_t>(20, 0xaa), std::vector<uint8_t>(50, 0xdd)) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 4: key 0x01..0x19.
  std::vector<uint8_t> key4;
  for (uint8_t b = 1; b <= 25; ++b) key4.push_back(b);
  CHECK(Hmac(key4, std::vector<uint8_t>(50, 0xcd)) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test cases 6 and 7: a key longer than a block is hashed first.
  const std::vector<uint8_t> long_key(131, 0xaa);
  CHECK(Hmac(long_key, Of("Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(Hmac(long_key, Of("This is a test using a larger than block-size key and a larger "
                          "than block-size data. The key needs to be hashed before being used "
                          "by the HMAC algorithm.")) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST_CASE("HMAC-SHA256 of parts equals that of their concatenation") {
  const std::vector<uint8_t> key = Of("Jefe");
  const std::vector<uint8_t> a = Of("what do ya want "), b = Of("for nothing?");
  CHECK(Hex(HmacSha256(key, {a, b})) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("MacEqual compares whole values") {
  const std::vector<uint8_t> a = Of("0123456789abcdef"), b = Of("0123456789abcdeX");
  CHECK(MacEqual(a, a));
  CHECK_FALSE(MacEqual(a, b));
  CHECK_FALSE(MacEqual(a, absl::MakeConstSpan(a).subspan(1)));
}

}  // namespace
}  // namespace overlap
