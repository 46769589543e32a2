#include "transport/tcp/link.h"

#include <poll.h>
#include <sched.h>

#include <cerrno>
#include <chrono>

namespace hvdlite::transport::tcp {
namespace {

// A wait for a peer wakes this often to look at its stall clock.
constexpr auto kStallSlice = std::chrono::milliseconds(250);

// Note [Polling before sleeping on a socket]
// A thread asleep in poll() learns that its peer's bytes have arrived only
// when the kernel wakes it, and on these virtual machines a wake-up costs
// tens of microseconds: a 4-byte allreduce between two hosts whose ping
// round trip was 20 us took 73 us (two exchanges, negotiation then data),
// where Open MPI, which polls, took 13 us. So a wait looks without sleeping
// for kPollBeforeSleep first (poll with a zero timeout, yielding the core
// between looks, so a thread waiting for it runs at once), about a round
// trip on ordinary links: a small message from a peer that is taking part
// arrives within it. Only then does it sleep in the kernel. A rank whose
// peers are late (computing, stalled) pays kPollBeforeSleep per cycle, at
// most one every 10 ms when it has nothing else to do (Note [Idle cycles]
// in core/runtime_cycles.cc): under 1 % of a core, measured in
// bench/waiting.py.
constexpr auto kPollBeforeSleep = std::chrono::microseconds(50);

}  // namespace

Link::Link(Socket socket, int self_rank, int peer_rank, std::string peer_address, std::string peer_host,
           std::chrono::milliseconds peer_timeout, const std::atomic<bool>& aborted, const StallLimits& stall)
    : socket_(std::move(socket)),
      self_rank_(self_rank),
      peer_rank_(peer_rank),
      peer_address_(std::move(peer_address)),
      peer_host_(std::move(peer_host)),
      peer_timeout_(peer_timeout),
      aborted_(aborted),
      stall_(stall) {}

void Link::send(const void* data, size_t size) {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    size_t n = sendSome(bytes, size);
    if (n == 0) waitForEither(*this, true, *this, false);
    bytes += n;
    size -= n;
  }
}

void Link::recv(void* data, size_t size) {
  auto* bytes = static_cast<char*>(data);
  while (size > 0) {
    size_t n = recvSome(bytes, size);
    if (n == 0) waitForEither(*this, false, *this, true);
    bytes += n;
    size -= n;
  }
}

size_t Link::sendSome(const void* data, size_t size) {
  try {
    return socket_.sendSome(data, size);
  } catch (const SocketError& error) {
    fail(error);
  }
}

size_t Link::recvSome(void* data, size_t size) {
  try {
    return socket_.recvSome(data, size);
  } catch (const SocketError& error) {
    fail(error);
  }
}

void Link::fail(const SocketError& error) const {
  if (aborted_.load()) {
    throw TransportError(detail::concat(
        "rank ", self_rank_, "'s transport was aborted while it talked to rank ", peer_rank_,
        " (tcp ", peer_address_, "); the job is shutting down after an error reported elsewhere"));
  }
  if (error.code() == ETIMEDOUT) {
    throw PeerLost(detail::concat(
                       "rank ", self_rank_, " lost host ", peer_host_, ": rank ", peer_rank_, " there (tcp ",
                       peer_address_, ") did not answer for ", peer_timeout_.count() / 1000.0,
                       " s (HVDLITE_PEER_TIMEOUT_SECONDS); the host is down or its network link is cut, or "
                       "the process is frozen"),
                   peer_rank_, true);
  }
  throw PeerLost(detail::concat("rank ", self_rank_, " lost its connection to rank ", peer_rank_, " on host ",
                                peer_host_, " (tcp ", peer_address_, ", ", error.what(), "). Rank ", peer_rank_,
                                " probably exited; see its log."),
                 peer_rank_, false);
}

// Errors and hang-ups wake poll too; the next send/recv then reports them.
void waitForEither(Link& to, bool want_send, Link& from, bool want_recv) {
  pollfd entries[2];
  int count = 0;
  if (want_send) entries[count++] = {to.socket().fd(), POLLOUT, 0};
  if (want_recv) {
    if (count == 1 && entries[0].fd == from.socket().fd()) {
      entries[0].events |= POLLIN;
    } else {
      entries[count++] = {from.socket().fd(), POLLIN, 0};
    }
  }
  if (count == 0) return;
  const auto poll_until = std::chrono::steady_clock::now() + kPollBeforeSleep;
  do {
    int rc = ::poll(entries, count, 0);
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) break;  // reported by the blocking poll below
    sched_yield();
  } while (std::chrono::steady_clock::now() < poll_until);
  Link& peer = want_recv ? from : to;
  StallClock clock(peer.stall(), peer.selfRank());
  while (true) {
    int rc = ::poll(entries, count, static_cast<int>(std::chrono::milliseconds(kStallSlice).count()));
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) peer.fail(SocketError(errno));
    if (rc == 0) clock.check("a transfer over tcp", peer.peerRank());
  }
}

void sendRecv(Link& to, const void* send_data, size_t send_bytes, Link& from, void* recv_data,
              size_t recv_bytes) {
  const char* out = static_cast<const char*>(send_data);
  char* in = static_cast<char*>(recv_data);
  size_t sent = 0, received = 0;
  while (sent < send_bytes || received < recv_bytes) {
    size_t moved = 0;
    if (sent < send_bytes) {
      size_t n = to.sendSome(out + sent, send_bytes - sent);
      sent += n;
      moved += n;
    }
    if (received < recv_bytes) {
      size_t n = from.recvSome(in + received, recv_bytes - received);
      received += n;
      moved += n;
    }
    if (moved == 0) waitForEither(to, sent < send_bytes, from, received < recv_bytes);
  }
}

void relay(Link& from, Link& to, void* data, size_t size) {
  char* bytes = static_cast<char*>(data);
  size_t sent = 0, received = 0;
  while (sent < size) {
    size_t moved = 0;
    if (received < size) {
      size_t n = from.recvSome(bytes + received, size - received);
      received += n;
      moved += n;
    }
    if (sent < received) {
      size_t n = to.sendSome(bytes + sent, received - sent);
      sent += n;
      moved += n;
    }
    if (moved == 0) waitForEither(to, sent < received, from, received < size);
  }
}

}  // namespace hvdlite::transport::tcp
