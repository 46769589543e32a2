// The control block at the start of a process set's segment: one progress
// counter per member, how members wait on each other, and how a failure on one
// member reaches the others.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/stall.h"

namespace hvdlite::transport::shm {

// Note [Progress counters]
// Every member owns one 32-bit counter that only it advances; all members
// run the same sequence of collectives, so "member j has reached value v"
// tells exactly which of j's writes and reads are done. A waiter spins for a
// few microseconds (the peer is usually running on the other core and about
// to arrive), yields its core for a while (Note [Yield budget] in
// progress.cc), then sleeps on the counter with futex(2), which works across
// processes on shared memory; the owner wakes sleepers only when the
// counter's waiter count says there are any, so the fast path is a store.
struct alignas(64) MemberState {
  std::atomic<uint32_t> progress;
  std::atomic<uint32_t> waiters;
  int32_t pid;
  int32_t global_rank;
};

struct alignas(64) ControlBlock {
  uint64_t magic;
  uint32_t size;
  std::atomic<int32_t> aborted_by;  // global rank + 1 of the member that aborted; 0 = none
};

// A view of the control block for one member. Not thread-safe, except abort().
class Progress {
 public:
  // `block` points at the start of the segment: a ControlBlock followed by
  // `size` MemberStates. The creator calls initialize() before anyone maps it.
  // `stall`: when a wait is reported and failed (Note [Stalled transfers]).
  Progress(char* block, int size, int rank, StallLimits stall = {});
  static size_t bytesFor(int size);
  void initialize();
  void join(int global_rank);  // records this member's pid and rank

  // Advances this member's counter to `value` and wakes whoever waits on it.
  void publish(uint32_t value);
  // Blocks until every member's counter has reached `value` (wrap-aware).
  // Throws TransportError when a member's process exited or a member aborted,
  // Timeout when a member made no progress for the stall shutdown time.
  void waitAll(uint32_t value, const char* what);

  // Thread-safe: marks the set aborted so that every member's wait fails now.
  void abort(int global_rank);
  void abortLocal() { local_abort_.store(true); }

 private:
  // The longest a waiter yields its core before sleeping, and how often a
  // wait past the spin yields that long whatever the budget (Note [Yield budget]).
  static constexpr std::chrono::nanoseconds kYieldFor = std::chrono::microseconds(100);
  static constexpr uint32_t kProbeEvery = 16;

  void waitFor(int member, uint32_t value, const char* what);
  // The futex phase of waitFor (Note [Health checks after a quiet sleep]).
  void sleepUntil(int member, uint32_t value, const char* what);
  void checkAborted(const char* what) const;
  void checkPeerAlive(int member, const char* what) const;

  ControlBlock* control_;
  MemberState* members_;
  int size_;
  int rank_;
  StallLimits stall_;
  std::atomic<bool> local_abort_{false};
  std::chrono::nanoseconds yield_budget_;  // Note [Yield budget]
  uint32_t waits_past_spin_ = 0;
};

}  // namespace hvdlite::transport::shm
