#include "transport/tcp/handshake.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/hmac.h"

namespace hvdlite::transport::tcp {
namespace {

constexpr char kMagic[4] = {'H', 'V', 'D', 'M'};
constexpr size_t kNonceSize = 16;
constexpr size_t kGreetingSize = Authenticator::kGreetingSize;
constexpr size_t kReplySize = Authenticator::kReplySize;
static_assert(kGreetingSize == sizeof(kMagic) + 4 + kNonceSize, "greeting layout");
static_assert(kReplySize == 4 + kNonceSize + kSha256Size, "reply layout");
constexpr char kAccepted = 1;
constexpr char kRejected = 0;
constexpr const char* kConnectLabel = "hvdlite-mesh-connect";
constexpr const char* kAcceptLabel = "hvdlite-mesh-accept";

void putU32(std::string* out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(value >> shift));
}

uint32_t getU32(const char* p) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

bool sameProof(const std::string& expected, const char* received) {
  return constantTimeEqual(expected.data(), received, kSha256Size);
}

}  // namespace

std::string Authenticator::proof(const char* label, int connector, int acceptor,
                                 const std::string& nonce_a, const std::string& nonce_c) const {
  std::string message = label;
  message.push_back('\0');
  putU32(&message, static_cast<uint32_t>(round_.size()));
  message += round_;
  putU32(&message, static_cast<uint32_t>(connector));
  putU32(&message, static_cast<uint32_t>(acceptor));
  message += nonce_a;
  message += nonce_c;
  Sha256Digest digest = hmacSha256(secret_, message);
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

void Authenticator::proveTo(Socket& socket, int peer_rank, const std::string& address,
                            Deadline deadline) const {
  auto context = [&] {
    return detail::concat("rank ", self_rank_, " connecting to rank ", peer_rank, " (tcp ",
                          address, "): ");
  };
  char greeting[kGreetingSize];
  socket.recvAll(greeting, sizeof(greeting), deadline);
  deadline = std::min(deadline, Clock::now() + kHandshakeLimit);
  if (std::memcmp(greeting, kMagic, sizeof(kMagic)) != 0) {
    throw TransportError(context() + "the listener there is not an hvdlite rank");
  }
  int found = static_cast<int>(getU32(greeting + 4));
  if (found != peer_rank) {
    throw TransportError(detail::concat(context(), "found rank ", found,
                                        " there instead; is another job reusing this address?"));
  }
  std::string nonce_a(greeting + 8, kNonceSize);
  std::string nonce_c = randomBytes(kNonceSize);
  std::string reply;
  putU32(&reply, static_cast<uint32_t>(self_rank_));
  reply += nonce_c;
  reply += proof(kConnectLabel, self_rank_, peer_rank, nonce_a, nonce_c);
  socket.sendAll(reply.data(), reply.size(), deadline);

  char verdict[1 + kSha256Size];
  try {
    socket.recvAll(verdict, 1, deadline);
  } catch (const SocketError& error) {
    if (error.code() != 0) throw;
    verdict[0] = kRejected;  // the acceptor may close before we read its answer
  }
  if (verdict[0] != kAccepted) {
    throw TransportError(context() + "it rejected this rank's job secret (authentication "
                                     "failed); every rank must use the launcher's HVDLITE_SECRET");
  }
  socket.recvAll(verdict + 1, kSha256Size, deadline);
  if (!sameProof(proof(kAcceptLabel, self_rank_, peer_rank, nonce_a, nonce_c), verdict + 1)) {
    throw TransportError(context() + "it could not prove the job secret (authentication "
                                     "failed); every rank must use the launcher's HVDLITE_SECRET");
  }
}

std::string Authenticator::greeting(std::string* nonce_a) const {
  std::string greeting(kMagic, sizeof(kMagic));
  putU32(&greeting, static_cast<uint32_t>(self_rank_));
  *nonce_a = randomBytes(kNonceSize);
  greeting += *nonce_a;
  return greeting;
}

int Authenticator::checkReply(const char* reply, const std::string& nonce_a, int world_size,
                              std::string* verdict, std::string* why) const {
  uint32_t claimed = getU32(reply);
  std::string nonce_c(reply + 4, kNonceSize);
  bool valid_rank = claimed > static_cast<uint32_t>(self_rank_) &&
                    claimed < static_cast<uint32_t>(world_size);
  int connector = static_cast<int>(claimed);
  if (!valid_rank ||
      !sameProof(proof(kConnectLabel, connector, self_rank_, nonce_a, nonce_c), reply + 20)) {
    *why = valid_rank ? detail::concat("claimed to be rank ", connector,
                                       " but failed authentication (wrong job secret?)")
                      : detail::concat("claimed to be rank ", claimed, ", not a rank that ",
                                       "connects to rank ", self_rank_);
    *verdict = std::string(1, kRejected);
    return -1;
  }
  *verdict = std::string(1, kAccepted);
  *verdict += proof(kAcceptLabel, connector, self_rank_, nonce_a, nonce_c);
  return connector;
}

}  // namespace hvdlite::transport::tcp
