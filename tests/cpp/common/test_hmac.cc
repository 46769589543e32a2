// Tests csrc/common/hmac.cc against the published vectors: FIPS 180-4 examples
// for SHA-256 and RFC 4231 for HMAC-SHA256.
#include "common/hmac.h"

#include <set>

#include "testing.h"

using namespace hvdlite;

namespace {

std::string hex(const Sha256Digest& digest, size_t bytes = kSha256Size) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    out += kDigits[digest[i] >> 4];
    out += kDigits[digest[i] & 15];
  }
  return out;
}

std::string repeat(char c, size_t n) { return std::string(n, c); }

}  // namespace

TEST(sha256_known_answers) {
  CHECK_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
           "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK_EQ(hex(sha256(repeat('a', 1000000))),
           "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(sha256_incremental_matches_one_shot) {
  std::string data = repeat('x', 200) + "tail";
  Sha256 hash;
  for (size_t i = 0; i < data.size(); i += 7) hash.update(std::string_view(data).substr(i, 7));
  CHECK_EQ(hex(hash.finish()), hex(sha256(data)));
}

TEST(hmac_rfc4231_short_keys) {
  CHECK_EQ(hex(hmacSha256(repeat('\x0b', 20), "Hi There")),
           "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK_EQ(hex(hmacSha256("Jefe", "what do ya want for nothing?")),
           "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK_EQ(hex(hmacSha256(repeat('\xaa', 20), repeat('\xdd', 50))),
           "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += static_cast<char>(i);
  CHECK_EQ(hex(hmacSha256(key4, repeat('\xcd', 50))),
           "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 5 publishes only the first 128 bits.
  CHECK_EQ(hex(hmacSha256(repeat('\x0c', 20), "Test With Truncation"), 16),
           "a3b6167473100ee06e0c796c2955552b");
}

TEST(hmac_rfc4231_keys_longer_than_a_block) {
  CHECK_EQ(hex(hmacSha256(repeat('\xaa', 131),
                          "Test Using Larger Than Block-Size Key - Hash Key First")),
           "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK_EQ(hex(hmacSha256(repeat('\xaa', 131),
                          "This is a test using a larger than block-size key and a larger than "
                          "block-size data. The key needs to be hashed before being used by the "
                          "HMAC algorithm.")),
           "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

// The store client's proof and the store's (Note [Store handshake] in
// hvdlite/store/protocol.py), as Python's client_proof and server_proof
// compute them for server nonce 0..15 and client nonce 16..31.
TEST(hmac_matches_the_store_handshake_proofs) {
  std::string nonces;
  for (int i = 0; i < 32; ++i) nonces += static_cast<char>(i);
  CHECK_EQ(hex(hmacSha256("s3cret", std::string("hvdlite-store-client", 21) + nonces)),
           "f3f62baaea09f68355430014035675e943e542a89978e44eecbe96d9f6fdcf1c");
  CHECK_EQ(hex(hmacSha256("s3cret", std::string("hvdlite-store-server", 21) + nonces)),
           "97d9c1374a91bdda26f4db80fd4e3d95632ca042b38e52bf4e2e4b6086169d10");
}

TEST(constant_time_equal) {
  Sha256Digest a = sha256("a"), b = sha256("a"), c = sha256("b");
  CHECK(constantTimeEqual(a.data(), b.data(), a.size()));
  CHECK(!constantTimeEqual(a.data(), c.data(), a.size()));
  CHECK(constantTimeEqual(a.data(), c.data(), 0));
}

TEST(random_bytes_differ) {
  std::set<std::string> seen;
  for (int i = 0; i < 16; ++i) {
    std::string nonce = randomBytes(16);
    CHECK_EQ(nonce.size(), size_t{16});
    seen.insert(nonce);
  }
  CHECK_EQ(seen.size(), size_t{16});
}

int main() { return RUN_ALL_TESTS(); }
