// Accepts connections on a rank's data listener and runs their handshakes
// (Note [Mesh handshake]) side by side, so that strangers cannot hold up the
// ranks that are being waited for.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "transport/tcp/handshake.h"
#include "transport/tcp/socket.h"

namespace hvdlite::transport::tcp {

// Note [Concurrent handshakes]
// Anyone who can reach a rank's data port can connect to it, so a handshake
// that waits for one connection at a time lets a few silent connections
// ("slow loris") use up the whole start timeout. Here one thread drives every
// pending handshake with poll(): each step only sends or reads what the
// kernel has, so a silent or slow connection costs nothing but its slot.
// (One thread and a poll loop rather than a thread per connection: nothing to
// join or lock, and the steps are three small messages.) Bounds:
//  - each handshake must finish within Authenticator::kHandshakeLimit of its
//    accept, all of it, not per read; later it is dropped;
//  - at most kMaxPending handshakes at once: a connection beyond that evicts
//    the oldest pending one, which has had the most time. An honest rank
//    answers within milliseconds, so it is evicted only by a flood of more
//    than kMaxPending connections within its round trip;
//  - a connection is bound to a rank only once it has proven the secret for
//    that rank; what it claimed before that means nothing.
// A connection that fails or breaks off is dropped and logged at info with
// its address; it never fails the job. One that claimed a rank of this job
// but failed its proof is most likely a rank started with another secret, so
// those are kept (refused()) for the error of a rendezvous that times out.
class Acceptor {
 public:
  static constexpr size_t kMaxPending = 32;

  struct Proven {
    int rank = -1;  // -1: none proven before the deadline
    Socket socket;
    std::string from;  // "ip:port"
  };

  // Borrows `listener` and `authenticator` for its lifetime. world_size and
  // log_rank as Authenticator::checkReply and HVD_LOG take them.
  Acceptor(Socket& listener, const Authenticator& authenticator, int world_size, int log_rank);
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;
  ~Acceptor();

  // Accepts and drives handshakes until one proves its rank (returned with
  // its socket, the verdict sent) or until `until` (rank -1).
  Proven next(Deadline until);

  // Connections that claimed a rank of this job and failed to prove it, as
  // "a connection from <ip:port> claimed to be rank 2 but ..."; at most a few.
  const std::vector<std::string>& refused() const { return refused_; }
  size_t refusedCount() const { return refused_count_; }

 private:
  struct Pending;

  void acceptWaiting();
  // Moves `pending` on as far as its socket allows; true when it is finished
  // (proven, refused or broken), with its rank in *rank (-1 unless proven).
  bool step(Pending& pending, int* rank);
  void drop(Pending& pending, const std::string& why, bool claimed_rank);

  Socket& listener_;
  const Authenticator& authenticator_;
  int world_size_;
  int log_rank_;
  std::deque<std::unique_ptr<Pending>> pending_;  // oldest first
  std::vector<std::string> refused_;
  size_t refused_count_ = 0;
};

}  // namespace hvdlite::transport::tcp
