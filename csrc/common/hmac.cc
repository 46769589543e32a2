#include "common/hmac.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/errors.h"

namespace hvdlite {
namespace {

// FIPS 180-4 section 4.2.2: the first 32 bits of the fractional parts of the
// cube roots of the first 64 primes.
constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

// Section 5.3.3: the first 32 bits of the fractional parts of the square
// roots of the first 8 primes.
constexpr std::array<uint32_t, 8> kInitialState = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                                   0xa54ff53a, 0x510e527f, 0x9b05688c,
                                                   0x1f83d9ab, 0x5be0cd19};

constexpr size_t kBlockSize = 64;

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

inline uint32_t loadBigEndian(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

inline void storeBigEndian(uint32_t x, uint8_t* p) {
  p[0] = static_cast<uint8_t>(x >> 24);
  p[1] = static_cast<uint8_t>(x >> 16);
  p[2] = static_cast<uint8_t>(x >> 8);
  p[3] = static_cast<uint8_t>(x);
}

}  // namespace

Sha256::Sha256() : state_(kInitialState), buffer_{} {}

// Section 6.2.2: message schedule, then 64 rounds over the working variables.
void Sha256::compressBlock(const uint8_t* block) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t) w[t] = loadBigEndian(block + 4 * t);
  for (int t = 16; t < 64; ++t) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t big_sigma1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t choose = (e & f) ^ (~e & g);
    uint32_t t1 = h + big_sigma1 + choose + kRoundConstants[t] + w[t];
    uint32_t big_sigma0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = big_sigma0 + majority;
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

void Sha256::update(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  total_bytes_ += size;
  while (size > 0) {
    size_t take = std::min(size, kBlockSize - buffered_);
    std::memcpy(buffer_.data() + buffered_, bytes, take);
    buffered_ += take;
    bytes += take;
    size -= take;
    if (buffered_ == kBlockSize) {
      compressBlock(buffer_.data());
      buffered_ = 0;
    }
  }
}

// Section 5.1.1 padding: a 1 bit, zeros, then the message length in bits as a
// 64-bit big-endian integer, filling the last block.
Sha256Digest Sha256::finish() {
  uint64_t bit_length = total_bytes_ * 8;
  const uint8_t one_bit = 0x80;
  update(&one_bit, 1);
  const uint8_t zero = 0;
  while (buffered_ != kBlockSize - 8) update(&zero, 1);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(bit_length >> (56 - 8 * i));
  update(length, 8);
  Sha256Digest digest;
  for (int i = 0; i < 8; ++i) storeBigEndian(state_[i], digest.data() + 4 * i);
  return digest;
}

Sha256Digest sha256(std::string_view data) {
  Sha256 hash;
  hash.update(data);
  return hash.finish();
}

// RFC 2104: H((K ^ opad) || H((K ^ ipad) || message)), K zero-padded to the
// block size.
Sha256Digest hmacSha256(std::string_view key, std::string_view message) {
  std::array<uint8_t, kBlockSize> block_key{};
  if (key.size() > kBlockSize) {
    Sha256Digest hashed = sha256(key);
    std::memcpy(block_key.data(), hashed.data(), hashed.size());
  } else {
    std::memcpy(block_key.data(), key.data(), key.size());
  }
  std::array<uint8_t, kBlockSize> inner_pad, outer_pad;
  for (size_t i = 0; i < kBlockSize; ++i) {
    inner_pad[i] = block_key[i] ^ 0x36;
    outer_pad[i] = block_key[i] ^ 0x5c;
  }
  Sha256 inner;
  inner.update(inner_pad.data(), inner_pad.size());
  inner.update(message);
  Sha256Digest inner_digest = inner.finish();
  Sha256 outer;
  outer.update(outer_pad.data(), outer_pad.size());
  outer.update(inner_digest.data(), inner_digest.size());
  return outer.finish();
}

bool constantTimeEqual(const void* a, const void* b, size_t size) {
  const auto* x = static_cast<const volatile uint8_t*>(a);
  const auto* y = static_cast<const volatile uint8_t*>(b);
  uint8_t difference = 0;
  for (size_t i = 0; i < size; ++i) difference |= x[i] ^ y[i];
  return difference == 0;
}

std::string randomBytes(size_t size) {
  std::string out(size, '\0');
  size_t filled = 0;
  while (filled < size) {
    ssize_t n = getrandom(out.data() + filled, size - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(detail::concat("cannot read random bytes from the OS (getrandom: ",
                                 std::strerror(errno), ")"));
    }
    filled += static_cast<size_t>(n);
  }
  return out;
}

}  // namespace hvdlite
