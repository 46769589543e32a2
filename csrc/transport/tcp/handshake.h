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

#include <string>

#include "transport/tcp/socket.h"

namespace hvdlite::transport::tcp {

class Authenticator {
 public:
  Authenticator(std::string secret, std::string round, int self_rank)
      : secret_(std::move(secret)), round_(std::move(round)), self_rank_(self_rank) {}

  // Connector side, on a socket just connected to `peer_rank` at `address`.
  // Throws TransportError when the peer rejects this rank's secret, fails to
  // prove its own, or is not the expected rank.
  void proveTo(Socket& socket, int peer_rank, const std::string& address, Deadline deadline) const;

  // Acceptor side. Returns the connector's rank once it has proven the
  // secret, or -1 (having answered "rejected") with the reason in *why. Only
  // ranks in (self, world_size) may connect to this rank.
  int verifyConnector(Socket& socket, int world_size, Deadline deadline, std::string* why) const;

 private:
  std::string proof(const char* label, int connector, int acceptor, const std::string& nonce_a,
                    const std::string& nonce_c) const;

  std::string secret_;
  std::string round_;
  int self_rank_;
};

}  // namespace hvdlite::transport::tcp
