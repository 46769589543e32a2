#include "transport/tcp/acceptor.h"

#include <poll.h>

#include <algorithm>

#include "common/logging.h"

namespace hvdlite::transport::tcp {
namespace {

// refused() keeps this many descriptions; the rest are only counted.
constexpr size_t kRefusedShown = 5;

int pollTimeoutMs(Deadline until) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  // Round up: a poll that wakes 0.4 ms early would spin until the deadline.
  return static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 60'000));
}

}  // namespace

// One connection's handshake, acceptor side (Note [Mesh handshake]): send
// the greeting, read the reply, send the verdict.
struct Acceptor::Pending {
  Socket socket;
  std::string from;
  Deadline deadline;
  std::string nonce_a;
  std::string out;  // greeting, then verdict
  size_t sent = 0;
  std::string reply;  // grows to Authenticator::kReplySize
  bool verdict_queued = false;
  int rank = -1;    // the proven rank, once the reply checked out
  std::string why;  // why it is refused, once it is

  bool sending() const { return sent < out.size(); }
};

Acceptor::Acceptor(Socket& listener, const Authenticator& authenticator, int world_size,
                   int log_rank)
    : listener_(listener), authenticator_(authenticator), world_size_(world_size),
      log_rank_(log_rank) {}

Acceptor::~Acceptor() {
  // The mesh stands (or gave up): whoever is still shaking hands is not a rank we need.
  for (auto& pending : pending_) {
    HVD_LOG(kInfo, log_rank_, "dropped a connection from ", pending->from,
            " that was still in its handshake when the mesh was complete");
  }
}

Acceptor::Proven Acceptor::next(Deadline until) {
  while (true) {
    // Finish what the last poll made ready, and drop what ran out of time.
    Deadline now = Clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      Pending& pending = **it;
      int rank = -1;
      bool finished = false;
      if (now >= pending.deadline) {
        drop(pending, "did not finish the handshake within " +
                          std::to_string(Authenticator::kHandshakeLimit.count()) + " s", false);
        finished = true;
      } else {
        finished = step(pending, &rank);
      }
      if (!finished) {
        ++it;
        continue;
      }
      Proven proven{rank, std::move(pending.socket), pending.from};
      it = pending_.erase(it);
      if (proven.rank >= 0) return proven;
    }
    if (now >= until) return Proven{};

    std::vector<pollfd> fds;
    fds.push_back({listener_.fd(), POLLIN, 0});
    Deadline wake = until;
    for (auto& pending : pending_) {
      fds.push_back({pending->socket.fd(), static_cast<short>(pending->sending() ? POLLOUT : POLLIN), 0});
      wake = std::min(wake, pending->deadline);
    }
    int ready = ::poll(fds.data(), fds.size(), pollTimeoutMs(wake));
    if (ready < 0 && errno != EINTR) throw SocketError(errno);
    if (ready > 0 && fds[0].revents != 0) acceptWaiting();
  }
}

void Acceptor::acceptWaiting() {
  while (true) {
    std::string from;
    // Only what is waiting now: a deadline of now would not even look, so
    // the last round of this loop costs one empty millisecond.
    Socket socket = listener_.accept(Clock::now() + std::chrono::milliseconds(1), &from);
    if (!socket.valid()) return;
    if (pending_.size() >= kMaxPending) {
      drop(*pending_.front(), "was evicted: " + std::to_string(kMaxPending) +
                                  " handshakes were pending and it was the oldest", false);
      pending_.pop_front();
    }
    auto pending = std::make_unique<Pending>();
    pending->socket = std::move(socket);
    pending->from = from;
    pending->deadline = Clock::now() + Authenticator::kHandshakeLimit;
    pending->out = authenticator_.greeting(&pending->nonce_a);
    pending_.push_back(std::move(pending));
  }
}

bool Acceptor::step(Pending& pending, int* rank) {
  try {
    while (true) {
      if (pending.sending()) {
        size_t moved = pending.socket.sendSome(pending.out.data() + pending.sent,
                                               pending.out.size() - pending.sent);
        if (moved == 0) return false;
        pending.sent += moved;
        continue;
      }
      if (pending.verdict_queued) break;  // verdict sent: done
      size_t want = Authenticator::kReplySize - pending.reply.size();
      char buffer[Authenticator::kReplySize];
      size_t moved = pending.socket.recvSome(buffer, want);
      if (moved == 0) return false;
      pending.reply.append(buffer, moved);
      if (pending.reply.size() < Authenticator::kReplySize) continue;
      pending.rank = authenticator_.checkReply(pending.reply.data(), pending.nonce_a, world_size_,
                                               &pending.out, &pending.why);
      pending.sent = 0;
      pending.verdict_queued = true;
    }
  } catch (const SocketError& error) {
    // A refused connector may close before it reads its verdict; the verdict stands.
    if (pending.verdict_queued && pending.rank < 0) {
      drop(pending, pending.why, true);
    } else {
      drop(pending, detail::concat("broke off the handshake (", error.what(), ")"), false);
    }
    return true;
  }
  if (pending.rank < 0) {
    drop(pending, pending.why, true);
    return true;
  }
  *rank = pending.rank;
  return true;
}

void Acceptor::drop(Pending& pending, const std::string& why, bool claimed_rank) {
  HVD_LOG(kInfo, log_rank_, "dropped a connection from ", pending.from, " to the data port: it ",
          why);
  pending.socket = Socket();
  if (!claimed_rank) return;
  ++refused_count_;
  if (refused_.size() < kRefusedShown) {
    refused_.push_back("a connection from " + pending.from + " " + why);
  }
}

}  // namespace hvdlite::transport::tcp
