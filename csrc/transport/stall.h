// How long a transport call may wait for a peer that does not take part
// (Note [Stalled transfers]), and the clock one such wait runs on.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace hvdlite::transport {

// Note [Stalled transfers]
// Inside a collective a rank waits for its peers' data or their turn. A peer
// that never comes (a process stopped by SIGSTOP or a debugger, a thread
// stuck in a driver call, a host frozen without closing its connections)
// does not close anything, so no error would ever end the wait. The runtime
// hands its stall limits (HVDLITE_STALL_CHECK_TIME_SECONDS and
// HVDLITE_STALL_SHUTDOWN_TIME_SECONDS) to the transports: a wait that has
// seen no progress from its peer for warn_after is reported on this rank,
// naming the operation and the peer, and one that lasts fail_after throws
// Timeout, which stops the runtime on every rank (Runtime::handleFatal)
// with that message. A wait is one step of a collective, so a long transfer
// that keeps moving bytes never trips it; negotiation's exchanges count too
// (a live peer answers them within its idle cycle, Note [Idle cycles]).
// Transports look at the clock only after a wait has slept, never on the
// fast path.
struct StallLimits {
  std::chrono::duration<double> warn_after{0.0};  // 0 = never report
  std::chrono::duration<double> fail_after{0.0};  // 0 = never fail
  // Prints a warning on this rank's log; may be empty.
  std::function<void(const std::string&)> warn;
};

// The clock of one wait: start it when the wait begins, check() it each
// time the wait wakes without progress.
class StallClock {
 public:
  StallClock(const StallLimits& limits, int rank);
  // `what`: the operation and transport ("allreduce over shared memory");
  // `peer`: the global rank waited for. Warns once after warn_after; throws
  // Timeout after fail_after.
  void check(const char* what, int peer);

 private:
  const StallLimits& limits_;
  int rank_;
  std::chrono::steady_clock::time_point start_;
  bool warned_ = false;
};

}  // namespace hvdlite::transport
