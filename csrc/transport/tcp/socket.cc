#include "transport/tcp/socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

namespace hvdlite::transport::tcp {
namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Resolves host:port; on failure returns null and the reason in *error.
AddrInfoList resolve(const std::string& host, int port, bool passive, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    *error = std::string("cannot resolve '") + host + "': " + gai_strerror(rc);
    return nullptr;
  }
  return AddrInfoList(found);
}

// One non-blocking connect attempt to one resolved address.
Socket connectOnce(const addrinfo& address, Deadline deadline, std::string* error) {
  Socket socket(::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         address.ai_protocol));
  if (!socket.valid()) {
    *error = errnoText(errno);
    return Socket();
  }
  if (::connect(socket.fd(), address.ai_addr, address.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      *error = errnoText(errno);
      return Socket();
    }
    if (!waitReady(socket.fd(), POLLOUT, deadline)) {
      *error = "timed out";
      return Socket();
    }
    int code = 0;
    socklen_t length = sizeof(code);
    getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &code, &length);
    if (code != 0) {
      *error = errnoText(code);
      return Socket();
    }
  }
  return socket;
}

void setOption(int fd, int level, int name, int value) {
  // Best effort: a kernel that lacks an option still carries the data.
  setsockopt(fd, level, name, &value, sizeof(value));
}

std::string numericPeer(const sockaddr_storage& address, socklen_t length) {
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, host, sizeof(host), port,
                  sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "unknown";
  }
  return formatAddress(host, std::atoi(port));
}

}  // namespace

SocketError::SocketError(int code) : TransportError(errnoText(code)), code_(code) {}

std::string errnoText(int code) {
  if (code == 0) return "connection closed by peer";
  std::string text = std::strerror(code);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

std::string formatAddress(const std::string& host, int port) {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

void parseAddress(const std::string& address, std::string* host, int* port) {
  size_t colon = address.rfind(':');
  bool ok = colon != std::string::npos && colon > 0 && colon + 1 < address.size();
  if (ok) {
    *host = address.substr(0, colon);
    if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
      *host = host->substr(1, host->size() - 2);
    }
    try {
      size_t used = 0;
      *port = std::stoi(address.substr(colon + 1), &used);
      ok = used == address.size() - colon - 1 && *port > 0 && *port < 65536;
    } catch (const std::exception&) {
      ok = false;
    }
  }
  if (!ok) throw InvalidArgument("malformed address '" + address + "' (expected host:port)");
}

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

int Socket::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

Socket Socket::connect(const std::string& host, int port, std::chrono::milliseconds timeout) {
  Deadline deadline = deadlineAfter(timeout);
  auto delay = std::chrono::milliseconds(20);
  std::string reason;
  while (true) {
    AddrInfoList addresses = resolve(host, port, false, &reason);
    for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
      Socket socket = connectOnce(*a, deadline, &reason);
      if (socket.valid()) return socket;
    }
    if (Clock::now() + delay >= deadline) break;
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(500));
  }
  throw TransportError(detail::concat("cannot connect to ", formatAddress(host, port), " within ",
                                      timeout.count(), " ms (", reason, ")"));
}

Socket Socket::listen(const std::string& host, int port) {
  std::string bind_host = host.empty() ? "127.0.0.1" : host;
  std::string reason;
  AddrInfoList addresses = resolve(bind_host, port, true, &reason);
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    Socket socket(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                           a->ai_protocol));
    if (!socket.valid()) {
      reason = errnoText(errno);
      continue;
    }
    setOption(socket.fd(), SOL_SOCKET, SO_REUSEADDR, 1);
    if (::bind(socket.fd(), a->ai_addr, a->ai_addrlen) == 0 &&
        ::listen(socket.fd(), SOMAXCONN) == 0) {
      return socket;
    }
    reason = errnoText(errno);
  }
  throw TransportError(detail::concat("cannot listen on ", formatAddress(bind_host, port), " (",
                                      reason, "); check HVDLITE_BIND_ADDR"));
}

Socket Socket::accept(Deadline deadline, std::string* peer) {
  while (waitReady(fd_, POLLIN, deadline)) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&address), &length,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      if (peer != nullptr) *peer = numericPeer(address, length);
      return Socket(fd);
    }
    // A connection that was reset before we took it, or a spurious wake-up.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR) continue;
    throw SocketError(errno);
  }
  return Socket();
}

int Socket::localPort() const {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw SocketError(errno);
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

// Note [Socket tuning]
// NODELAY: collectives send small headers and latency-bound messages that
// must leave at once. Buffers: the kernel's autotuning already grows loopback
// and LAN buffers to the sysctl maxima, and setting SO_SNDBUF/SO_RCVBUF by
// hand would switch that off and cap them at net.core.{w,r}mem_max, so they
// are left alone.
// A peer host that vanishes without a reset (power, a cable, a blackholed
// switch port) must fail its peers within the peer timeout T
// (HVDLITE_PEER_TIMEOUT_SECONDS, default 10 s), not after the kernel's ~15
// minutes. Two kernel mechanisms cover the two ways a link can be waiting:
// keepalive probes an idle link (a rank blocked receiving) after T/5 of
// silence, every T/10, and the user timeout T closes the link once sent
// data or probes stay unacknowledged that long (with keepalive on, it is
// also what ends a probed link). The peer's kernel answers the probes, so a
// rank that computes for minutes without any collective is never suspected:
// only a host (or its link) that stopped answering is. A peer process that
// is alive but reads nothing for T while we have data queued also fails the
// link; its background thread reads every cycle, so that means the process
// is frozen (SIGSTOP, a debugger), which is a stall anyway.
void Socket::tuneForData(std::chrono::milliseconds peer_timeout) {
  setOption(fd_, IPPROTO_TCP, TCP_NODELAY, 1);
  if (peer_timeout.count() <= 0) return;
  const int seconds = static_cast<int>(std::max<int64_t>(1, peer_timeout.count() / 1000));
  setOption(fd_, SOL_SOCKET, SO_KEEPALIVE, 1);
  setOption(fd_, IPPROTO_TCP, TCP_KEEPIDLE, std::max(1, seconds / 5));
  setOption(fd_, IPPROTO_TCP, TCP_KEEPINTVL, std::max(1, seconds / 10));
  setOption(fd_, IPPROTO_TCP, TCP_KEEPCNT, 10);
  setOption(fd_, IPPROTO_TCP, TCP_USER_TIMEOUT, static_cast<int>(peer_timeout.count()));
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

size_t Socket::sendSome(const void* data, size_t size) {
  while (true) {
    ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno != EINTR) throw SocketError(errno);
  }
}

size_t Socket::recvSome(void* data, size_t size) {
  while (true) {
    ssize_t n = ::recv(fd_, data, size, 0);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) throw SocketError(0);
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno != EINTR) throw SocketError(errno);
  }
}

void Socket::sendAll(const void* data, size_t size, Deadline deadline) {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    size_t n = sendSome(bytes, size);
    if (n == 0 && !waitReady(fd_, POLLOUT, deadline)) throw SocketError(ETIMEDOUT);
    bytes += n;
    size -= n;
  }
}

void Socket::recvAll(void* data, size_t size, Deadline deadline) {
  auto* bytes = static_cast<char*>(data);
  while (size > 0) {
    size_t n = recvSome(bytes, size);
    if (n == 0 && !waitReady(fd_, POLLIN, deadline)) throw SocketError(ETIMEDOUT);
    bytes += n;
    size -= n;
  }
}

bool waitReady(int fd, short events, Deadline deadline) {
  pollfd entry{fd, events, 0};
  while (true) {
    int timeout_ms = -1;
    if (deadline != kNoDeadline) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      timeout_ms = static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
    }
    int rc = ::poll(&entry, 1, timeout_ms);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) throw SocketError(errno);
  }
}

}  // namespace hvdlite::transport::tcp
