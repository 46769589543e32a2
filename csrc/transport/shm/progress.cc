#include "transport/shm/progress.h"

#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <fstream>
#include <new>
#include <string>

#include "common/errors.h"

namespace hvdlite::transport::shm {
namespace {

constexpr uint64_t kMagic = 0x6876646c73686d31ULL;  // "hvdlshm1"
// A peer running on the other core usually arrives within a few
// microseconds: spin that long. Then keep looking but yield the core between
// looks, for at most the yield budget (Note [Yield budget]); only after that
// sleep in the kernel.
constexpr auto kSpinFor = std::chrono::microseconds(3);
// Pauses before the spin first reads the clock (under a microsecond: a pause
// takes 10 to 150 cycles, by CPU).
constexpr int kUntimedSpins = 64;
// A sleep ends at least this often, and a sleeper that has not looked at its
// peer's process for this long looks (Note [Health checks after a quiet sleep]).
constexpr long kSleepNanos = 20 * 1000 * 1000;
constexpr auto kHealthEvery = std::chrono::nanoseconds(kSleepNanos);

bool reached(uint32_t have, uint32_t want) { return static_cast<int32_t>(have - want) >= 0; }

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Returns whether the sleep lasted its whole timeout (nobody woke it).
bool futexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  timespec timeout{0, kSleepNanos};
  long slept = syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &timeout, nullptr, 0);
  return slept == -1 && errno == ETIMEDOUT;
}

void futexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// A dead process, or one that has exited and waits to be reaped.
bool processGone(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z';
}

}  // namespace

Progress::Progress(char* block, int size, int rank, StallLimits stall)
    : control_(reinterpret_cast<ControlBlock*>(block)),
      members_(reinterpret_cast<MemberState*>(block + sizeof(ControlBlock))),
      size_(size),
      rank_(rank),
      stall_(std::move(stall)),
      yield_budget_(kYieldFor) {}

size_t Progress::bytesFor(int size) { return sizeof(ControlBlock) + size * sizeof(MemberState); }

void Progress::initialize() {
  new (control_) ControlBlock();
  control_->magic = kMagic;
  control_->size = static_cast<uint32_t>(size_);
  control_->aborted_by.store(0);
  for (int r = 0; r < size_; ++r) {
    auto* member = new (&members_[r]) MemberState();
    member->progress.store(0);
    member->waiters.store(0);
    member->pid = 0;
    member->global_rank = -1;
  }
}

void Progress::join(int global_rank) {
  HVD_CHECK(control_->magic == kMagic && control_->size == static_cast<uint32_t>(size_),
            "shared-memory segment was not initialised for ", size_, " members");
  members_[rank_].pid = static_cast<int32_t>(getpid());
  members_[rank_].global_rank = global_rank;
}

void Progress::publish(uint32_t value) {
  MemberState& me = members_[rank_];
  me.progress.store(value, std::memory_order_seq_cst);
  if (me.waiters.load(std::memory_order_seq_cst) != 0) futexWakeAll(&me.progress);
}

void Progress::waitAll(uint32_t value, const char* what) {
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) waitFor(r, value, what);
  }
}

// Note [Yield budget]
// Between the spin and the sleep a waiter yields its core in a loop, so that
// a peer arriving within tens of microseconds is seen without a futex wake.
// That pays only while the peer runs on another core. When ranks share cores
// with each other or with the framework's threads (2 ranks on 2 cores, each
// with a compute thread), the peer is often waiting for a core, and the loop
// keeps this one busy: the scheduler does not hand it over (sched_yield only
// reorders this core's queue, and a busy core pulls no waiting thread from
// the other), so the loop runs out and the wait sleeps anyway, later. At 2
// ranks on 2 cores with a compute thread each (bench/gradient_allreduce.py
// --compete, the wait counter of bench/wait_counts.py) a whole loop before
// every sleep cost 7,000-21,000 yields and about 7 ms of CPU a step of the
// MLP's gradients that the compute threads lost; and when a 4-byte
// allreduce's two ranks shared a core, its p90 was 230 us against 25 us with
// no loop. So the loop's length adapts to whether it works: a loop that sees
// the peer arrive restores the budget whole (kYieldFor); one that runs out
// halves it, down to none. With no loop there is nothing to learn from, so
// every kProbeEvery-th wait past the spin yields the whole kYieldFor again:
// if peers keep pace again, that probe restores the budget. Each member of a
// set learns its own (one Progress per process and set).
void Progress::waitFor(int member, uint32_t value, const char* what) {
  MemberState& peer = members_[member];
  if (reached(peer.progress.load(std::memory_order_acquire), value)) return;
  // The clock is first read after kUntimedSpins pauses: most waits end
  // sooner, and a clock reading costs as much as a short wait's spinning.
  std::chrono::steady_clock::time_point start;
  for (int i = 1;; ++i) {
    cpuRelax();
    if (reached(peer.progress.load(std::memory_order_acquire), value)) return;
    if (i % kUntimedSpins != 0) continue;
    if (i == kUntimedSpins) start = std::chrono::steady_clock::now();
    else if (std::chrono::steady_clock::now() > start + kSpinFor) break;
  }
  const bool probe = ++waits_past_spin_ % kProbeEvery == 0;
  const auto yield_until = start + (probe ? kYieldFor : yield_budget_);
  if (std::chrono::steady_clock::now() < yield_until) {
    do {
      sched_yield();
      if (reached(peer.progress.load(std::memory_order_acquire), value)) {
        yield_budget_ = kYieldFor;
        return;
      }
    } while (std::chrono::steady_clock::now() < yield_until);
    yield_budget_ /= 2;
  }
  sleepUntil(member, value, what);
}

// Note [Health checks after a quiet sleep]
// Whether a peer's process is gone costs a kill(2) and an open, read and
// close of /proc/<pid>/stat: done before every sleep it was a hundred /proc
// reads a training step under contention. A dead peer never publishes or
// wakes anyone again, so a sleeper on its counter sleeps out its timeout:
// it looks after a sleep that timed out, and after kHealthEvery of sleeps
// that others' wakes ended early (an abort's, or a publish short of the
// value), so a death is seen within about kSleepNanos either way. The abort
// flags are plain loads and are looked at before every sleep.
void Progress::sleepUntil(int member, uint32_t value, const char* what) {
  MemberState& peer = members_[member];
  StallClock clock(stall_, members_[rank_].global_rank);
  const std::string where = std::string(what) + " over shared memory";
  auto next_health_check = std::chrono::steady_clock::now() + kHealthEvery;
  bool timed_out = false;
  while (true) {
    checkAborted(what);
    if (timed_out || std::chrono::steady_clock::now() >= next_health_check) {
      checkPeerAlive(member, what);
      next_health_check = std::chrono::steady_clock::now() + kHealthEvery;
    }
    clock.check(where.c_str(), peer.global_rank);
    peer.waiters.fetch_add(1, std::memory_order_seq_cst);
    uint32_t seen = peer.progress.load(std::memory_order_seq_cst);
    timed_out = !reached(seen, value) && futexWait(&peer.progress, seen);
    peer.waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(peer.progress.load(std::memory_order_acquire), value)) return;
  }
}

void Progress::checkAborted(const char* what) const {
  int by = control_->aborted_by.load();
  if (local_abort_.load() || by != 0) {
    throw TransportError(detail::concat(
        what, " over shared memory stopped: ",
        by != 0 ? "rank " + std::to_string(by - 1) + " aborted (it hit an error; see its log)"
                : std::string("this rank's transport was closed")));
  }
}

void Progress::checkPeerAlive(int member, const char* what) const {
  const MemberState& peer = members_[member];
  if (processGone(peer.pid)) {
    throw PeerLost(detail::concat("rank ", members_[rank_].global_rank, " lost rank ", peer.global_rank,
                                  " (shared memory, pid ", peer.pid, " on this host has exited) during ", what,
                                  ". Rank ", peer.global_rank, " probably crashed; see its log"),
                   peer.global_rank, false);
  }
}

void Progress::abort(int global_rank) {
  int32_t none = 0;
  control_->aborted_by.compare_exchange_strong(none, global_rank + 1);
  local_abort_.store(true);
  for (int r = 0; r < size_; ++r) futexWakeAll(&members_[r].progress);
}

}  // namespace hvdlite::transport::shm
