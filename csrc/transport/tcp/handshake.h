// Mutual authentication of a new data connection with the job secret.
//
// Note [Mesh handshake]
// The accepting (lower) rank speaks first:
//   acceptor  -> "HVDM", u32 acceptor rank, 16-byte nonce A
//   connector -> u32 connector rank, 16-byte nonce C, HMAC(secret, connect message)
//   acceptor  -> 0x00 (rejected, closes) | 0x01, HMAC(secret, accept message)
// Both messages cover a direction label, the rendezvous round (key prefix),
// both ranks and both nonces, so a proof is good for exactly one connection:
// it cannot be replayed into another connection, another round, or passed
// off as the other direction's proof. A stranger that does not know the
// secret cannot join the mesh, and once the mesh is built the listener is
// closed, so none can inject data later. Integers are big-endian.
#pragma once

#include <chrono>
#include <string>

#include "transport/tcp/socket.h"

namespace hvdlite::transport::tcp {

class Authenticator {
 public:
  // The acceptor's greeting and the connector's reply, in bytes.
  static constexpr size_t kGreetingSize = 4 + 4 + 16;
  static constexpr size_t kReplySize = 4 + 16 + 32;
  // How long a handshake may take from the greeting on, all of it: honest
  // ranks answer within milliseconds, so only a stranger (or a hung rank)
  // ever reaches it (Note [Concurrent handshakes]).
  static constexpr std::chrono::seconds kHandshakeLimit{5};

  Authenticator(std::string secret, std::string round, int self_rank)
      : secret_(std::move(secret)), round_(std::move(round)), self_rank_(self_rank) {}

  // Connector side, on a socket just connected to `peer_rank` at `address`.
  // Waits for the greeting until `deadline` (the acceptor may still be busy
  // connecting to its own lower ranks), then allows the rest kHandshakeLimit.
  // Throws TransportError when the peer rejects this rank's secret, fails to
  // prove its own, or is not the expected rank.
  void proveTo(Socket& socket, int peer_rank, const std::string& address, Deadline deadline) const;

  // Acceptor side, in steps so that one thread can drive many handshakes
  // without blocking on any (Note [Concurrent handshakes]): send greeting(),
  // read kReplySize bytes, and send the verdict checkReply() writes.
  // greeting() puts the nonce it carries in *nonce_a.
  std::string greeting(std::string* nonce_a) const;
  // Returns the connector's rank once it has proven the secret, or -1 (the
  // verdict is then "rejected") with the reason in *why. Only ranks in
  // (self, world_size) may connect to this rank.
  int checkReply(const char* reply, const std::string& nonce_a, int world_size,
                 std::string* verdict, std::string* why) const;

 private:
  std::string proof(const char* label, int connector, int acceptor, const std::string& nonce_a,
                    const std::string& nonce_c) const;

  std::string secret_;
  std::string round_;
  int self_rank_;
};

}  // namespace hvdlite::transport::tcp
