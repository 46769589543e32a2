// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), written here so that the
// core can authenticate connections with the job secret without linking a
// crypto library. Used by the rendezvous store client and the TCP mesh
// handshake; the Python side (hvdlite/store/protocol.py) computes the same
// digests with hashlib/hmac.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hvdlite {

constexpr size_t kSha256Size = 32;
using Sha256Digest = std::array<uint8_t, kSha256Size>;

// Incremental hash: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view data) { update(data.data(), data.size()); }
  Sha256Digest finish();

 private:
  void compressBlock(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(std::string_view data);

// HMAC-SHA256 of `message` under `key` (any length; long keys are hashed
// first, as RFC 2104 specifies).
Sha256Digest hmacSha256(std::string_view key, std::string_view message);

// Compares without an early exit, so the time taken does not tell an attacker
// how many leading bytes of a forged digest were right.
bool constantTimeEqual(const void* a, const void* b, size_t size);

// `size` bytes from the operating system's CSPRNG (getrandom), for nonces.
std::string randomBytes(size_t size);

}  // namespace hvdlite
