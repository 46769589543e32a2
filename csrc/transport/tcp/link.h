// An authenticated data connection from this rank to one peer rank, and the
// full-duplex transfer every collective is built on.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "transport/stall.h"
#include "transport/tcp/socket.h"

namespace hvdlite::transport::tcp {

// Owned by the Mesh and shared by every communicator whose set contains both
// ranks; the runtime's single background thread serialises their use. Any
// failure throws TransportError naming this rank, the peer's global rank, its
// address and the cause. A wait for the peer that lasts is reported and
// failed by `stall` (Note [Stalled transfers]), which the Mesh owns.
class Link {
 public:
  Link(Socket socket, int self_rank, int peer_rank, std::string peer_address, std::string peer_host,
       std::chrono::milliseconds peer_timeout, const std::atomic<bool>& aborted, const StallLimits& stall);
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int peerRank() const { return peer_rank_; }
  Socket& socket() { return socket_; }
  const Socket& socket() const { return socket_; }

  // Blocking, until every byte has moved or the connection fails.
  void send(const void* data, size_t size);
  void recv(void* data, size_t size);
  // Non-blocking: what the kernel takes or has now; 0 if nothing.
  size_t sendSome(const void* data, size_t size);
  size_t recvSome(void* data, size_t size);

  // Thread-safe (Transport::abort): wakes a blocked user and EOFs the peer.
  void shutdown() { socket_.shutdown(); }

  // Rethrows a socket error as the TransportError users see.
  [[noreturn]] void fail(const SocketError& error) const;

  const StallLimits& stall() const { return stall_; }
  int selfRank() const { return self_rank_; }

 private:
  Socket socket_;
  int self_rank_;
  int peer_rank_;
  std::string peer_address_;
  std::string peer_host_;
  std::chrono::milliseconds peer_timeout_;
  const std::atomic<bool>& aborted_;
  const StallLimits& stall_;
};

// Blocks until `to` can take data (if want_send) or `from` has some (if
// want_recv); a failed or closed connection counts as ready. Throws Timeout
// after the stall shutdown time without either (Note [Stalled transfers]).
void waitForEither(Link& to, bool want_send, Link& from, bool want_recv);

// Receives `size` bytes from `from` into data and forwards each byte to `to`
// as soon as it has arrived (the pipelined chain of a large broadcast).
void relay(Link& from, Link& to, void* data, size_t size);

// Sends send_bytes to `to` while receiving recv_bytes from `from`, making
// progress on whichever side the kernel allows, so that ranks exchanging large
// buffers in a ring (or pairwise) never wait for each other's socket buffers
// to drain. `to` and `from` may be the same link; either size may be 0.
void sendRecv(Link& to, const void* send_data, size_t send_bytes, Link& from, void* recv_data,
              size_t recv_bytes);

}  // namespace hvdlite::transport::tcp
