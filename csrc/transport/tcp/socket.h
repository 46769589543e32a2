// One TCP socket and the blocking/non-blocking primitives the store client,
// the mesh handshake and the collectives are built from. Knows nothing about
// ranks: callers add that context to the errors (see Link).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/errors.h"

namespace hvdlite::transport::tcp {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
constexpr Deadline kNoDeadline = Deadline::max();

inline Deadline deadlineAfter(std::chrono::milliseconds timeout) {
  return timeout.count() < 0 ? kNoDeadline : Clock::now() + timeout;
}

// A socket-level failure. code() is the errno, 0 for an orderly close by the
// peer, ETIMEDOUT for a missed deadline; what() is the bare cause ("connection
// reset by peer"), to be wrapped with who was talking to whom.
class SocketError : public TransportError {
 public:
  explicit SocketError(int code);
  int code() const { return code_; }

 private:
  int code_;
};

// "connection reset by peer": strerror() in the lower case our messages use.
std::string errnoText(int code);

// "host:port", with brackets around an IPv6 literal.
std::string formatAddress(const std::string& host, int port);
// Splits "host:port" / "[v6]:port"; throws InvalidArgument on anything else.
void parseAddress(const std::string& address, std::string* host, int* port);

// Owns one file descriptor, always in non-blocking mode; closed by the
// destructor. Not thread-safe, except shutdown(), which another thread may
// call to wake up a blocked user.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Connects to host:port, retrying refused/unreachable attempts with backoff
  // until `timeout` has passed (the other side may not listen yet). Throws
  // TransportError naming host:port and the last reason.
  static Socket connect(const std::string& host, int port, std::chrono::milliseconds timeout);
  // Listens on host (an address or name; "" = 127.0.0.1) at port (0 = any).
  static Socket listen(const std::string& host, int port);

  // Waits for one connection until `deadline`; returns an invalid Socket on
  // timeout. *peer receives the connecting "ip:port".
  Socket accept(Deadline deadline, std::string* peer);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int localPort() const;
  // Bytes the kernel has sent on this connection, each once (not counting
  // retransmissions); 0 where unknown (socket_stats.cc).
  uint64_t bytesSent() const;

  // TCP_NODELAY, large buffers and keepalive: see Note [Socket tuning].
  // peer_timeout: Note [Socket tuning]; 0 keeps the kernel's keepalive.
  void tuneForData(std::chrono::milliseconds peer_timeout);
  // Makes every blocked or later operation on this socket fail and sends the
  // peer an EOF. Thread-safe; the descriptor stays open until destruction.
  void shutdown();

  // Moves what the kernel takes now: returns bytes moved, 0 if it would
  // block. Throws SocketError on error and, for recvSome, on EOF.
  size_t sendSome(const void* data, size_t size);
  size_t recvSome(void* data, size_t size);

  // Blocking transfers; throw SocketError(ETIMEDOUT) past the deadline.
  void sendAll(const void* data, size_t size, Deadline deadline = kNoDeadline);
  void recvAll(void* data, size_t size, Deadline deadline = kNoDeadline);

 private:
  int release();

  int fd_ = -1;
};

// Waits until `fd` is ready for `events` (POLLIN/POLLOUT); false at deadline.
// Errors and hang-ups count as ready, so that the next call reports them.
bool waitReady(int fd, short events, Deadline deadline);

}  // namespace hvdlite::transport::tcp
