#include "jax/call_driver.h"

#include <sys/prctl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

#include "api/api.h"
#include "jax/completion_threads.h"

namespace hvdlite::jax_ffi {
namespace {

// Note [Driving a step's calls]
// Where a jitted step of 100 separate 4 KiB allreduces spent its time when
// each call woke the core's background thread and each completion was handed
// to a completion thread (timestamps in a build of the handler with trace
// points, 2 ranks on the 2-core development machine, p10 of 290 steps at
// load 10; jax 0.10.2 CPU):
//   - JAX runs the step inside the jit call on the Python thread: XLA:CPU's
//     thunk executor starts every ready instruction there, handing halves of
//     its ready queue to its Eigen pool (here two threads), and the Python
//     thread then blocks inside the call until the step's last future
//     completes. The executor does not wait for a pending call before
//     starting the next ready instruction (it waits only in its sequential
//     mode: 8 instructions or fewer, or buffers of at most 512 bytes). A
//     completed future's continuation runs on the completing thread, which
//     posts what became ready to the Eigen pool unless it is one of the
//     pool's own threads, so completing a future never runs the rest of the
//     step on a thread of ours in this executor.
//   - The first call ran 70 us after the jit call began (JAX's dispatch of
//     100 arguments) and the 100th returned at 250 us, after 100 copies (an
//     allreduce writes into a copy of its argument) and 100 calls on three
//     threads: a call cost 1.0 us, its enqueue 0.6 of that.
//   - The first completion came at 800 us, the last at 930: the first
//     enqueue had woken the background thread, whose first cycle took the
//     calls queued by then and a later cycle the rest (both wait for the
//     peer's cycles); then each of the 100 completions was a task for a
//     completion thread (an allocation, a lock and a wake-up each on the
//     thread of the cycle, and a wake-up to run it).
//   - The jit call returned at 1,060 us, 130 us after the last completion.
// So, as hvdlite.torch's synchronize() runs the cycle on the thread that
// waits, a call here queues its requests without waking the background
// thread (HVDLITE_REQUEST_NO_WAKE), and the first call of a burst sends one
// driver, a task on a completion thread (Note [Completion threads]), which
//   1. lets the burst finish, so that the step's calls go to one
//      negotiation: it waits until as many calls have come as the previous
//      driver saw (a jitted step runs again and again with the same calls),
//      or none came for kSettle, at most kMaxSettle (a step of one call
//      goes at once);
//   2. runs the cycles itself (hvdlite_drive_cycles) until some call has
//      completed, or, when another thread is running them, waits until
//      every pending call has completed (at most kRecheck), so that
//      completions from the background thread's cycle are still reported in
//      one batch rather than one wake-up each;
//   3. tells XLA of every call completed so far, one batch, on its own
//      thread: no hand-off to another thread per call.
// It goes on until no call is pending. Telling XLA may still run the rest of
// the step on this thread in an executor that does (an io_callback there may
// block until its collective completes), so the driver stands down while it
// reports: a call queued or completed meanwhile sends a new driver, and the
// blocked one leaves once it returns. The background thread still runs the
// cycles when nobody drives (the driver hands them back when it stops) and
// while the rank is stalled (Note [Backing off a stall] in
// core/runtime_cycles.cc). The same step driven (median of 290 steps at load
// 8): the 100th call returned at 228 us, the driver's one cycle began at 236
// and had completed all 100 at 364, and the jit call returned at 458 us:
// 0.50 ms a step (the undriven handler: 2.39 ms at load 7 minutes before).
// What is left is JAX's and XLA's (dispatch, the copies, the executor's
// hand-offs, waking the Python thread) and the cycle itself; a call costs
// 0.7 us of which the core's enqueue is most, so describing the calls in
// advance would save little.
constexpr auto kSettle = std::chrono::microseconds(10);
constexpr auto kMaxSettle = std::chrono::microseconds(300);
// Note [Settling asleep]
// The settling driver first spun on sched_yield; with 2 ranks on 2 cores
// that took a core's share from the XLA threads still issuing the step's
// calls. It sleeps instead: the call that brings the count to what the
// previous step saw wakes it, once; otherwise it looks every kSettle (with
// 1 us of timer slack, not the kernel's 50) whether calls still come.
// Only a driver sent by a call learns the burst's size: one sent by a
// completion saw a fraction of a step, and its count (often 1) made the next
// step's driver go before that step's calls were queued.
// 100 x 4 KiB in jit, 2 ranks, load 1.0-1.3, pairs run in turn: separate
// calls 0.51-0.56 ms a step asleep against 0.51-0.67 spinning.
// A waiting driver looks again after this long whether it may drive.
constexpr auto kRecheck = std::chrono::milliseconds(1);

struct Driver {
  std::mutex mutex;
  std::condition_variable completed_cv;
  std::vector<std::function<void()>> completed;  // reports not yet run
  // Counted calls not completed yet; completed.size() mirrored for ready().
  std::atomic<int> pending{0};
  std::atomic<int> completed_count{0};
  std::atomic<uint64_t> queued{0};  // every callQueued() so far
  bool active = false;    // a driver runs or is on its way
  bool sleeping = false;  // it waits on completed_cv
  // While the driver settles: the count of `queued` that ends the burst
  // (callQueued wakes it then, once), else 0.
  uint64_t settle_target = 0;
  uint64_t first = 0;     // `queued` when the latest driver was sent
  uint64_t expected = 0;  // calls the previous driver saw, first to last
  bool sent_by_call = false;  // the latest driver was sent by a call, not a completion
  uint64_t drivers = 0;   // drivers sent so far: one that stood down learns whether another came
  uint64_t here_first = 0;  // `queued` before the call that drives here

  bool idle() const { return pending.load() == 0 && completed_count.load() == 0; }
};

// Never destroyed: a detached completion thread may still use it at exit.
Driver& driver() {
  static auto* instance = new Driver;
  return *instance;
}

int32_t readyToReport(void* user) {
  auto* d = static_cast<Driver*>(user);
  return d->completed_count.load() > 0 || d->pending.load() == 0;
}

// Step 1 of Note [Driving a step's calls]: `first` as Driver::first was
// when this driver was sent, `expected` as Driver::expected. It sleeps
// rather than spins (Note [Settling asleep]).
void settle(Driver& d, uint64_t first, uint64_t expected) {
  // The kernel's default 50 us of timer slack would stretch every kSettle.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(d.mutex);
  d.settle_target = first + expected;
  uint64_t seen = d.queued.load();
  while (seen - first < expected) {
    d.completed_cv.wait_for(lock, kSettle, [&] { return d.queued.load() - first >= expected; });
    const uint64_t queued = d.queued.load();
    if (queued == seen || std::chrono::steady_clock::now() - start >= kMaxSettle) break;
    seen = queued;
  }
  d.settle_target = 0;
}

void drive() {
  Driver& d = driver();
  uint64_t first, expected, me;
  bool sent_by_call;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    first = d.first;
    expected = d.expected;
    sent_by_call = d.sent_by_call;
    me = d.drivers;
  }
  if (sent_by_call) settle(d, first, expected);
  std::vector<std::function<void()>> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(d.mutex);
      batch.swap(d.completed);
      d.completed_count = 0;
      if (batch.empty() && d.pending.load() == 0) {
        d.active = false;
        if (sent_by_call) d.expected = d.queued.load() - first;
        return;
      }
      if (!batch.empty()) d.active = false;  // stands down while it reports
    }
    if (!batch.empty()) {
      for (auto& report : batch) report();
      batch.clear();
      std::lock_guard<std::mutex> lock(d.mutex);
      if (d.active || d.drivers != me) return;  // another driver took over
      if (d.idle()) {
        if (sent_by_call) d.expected = d.queued.load() - first;
        return;
      }
      d.active = true;
      continue;
    }
    if (hvdlite_drive_cycles(readyToReport, &d) == 1) continue;
    std::unique_lock<std::mutex> lock(d.mutex);
    d.sleeping = true;
    d.completed_cv.wait_for(lock, kRecheck, [&d] { return d.pending.load() == 0; });
    d.sleeping = false;
  }
}

}  // namespace

void callStarting() { driver().pending.fetch_add(1); }

// Note [A call counts once queued]
// A driver sent when a call began to queue its requests ran its cycles
// while the call was still queuing them: a grouped_allreduce of 100 arrays
// takes about 60 us to queue, so its step went to several negotiations, each
// a round trip with the peer, with the driver's cycles taking the core from
// the thread still queuing (2 ranks on 2 cores: one jitted grouped step
// 0.45 -> 0.61 ms with the driver). So a call is counted for the settle wait,
// and sends the driver, only once every request of it is queued; it is
// counted as pending before, so that a driver already running, whose cycle
// may complete the call's first requests, does not leave before the call's
// completion is reported.
void callQueued() {
  Driver& d = driver();
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    start = !d.active;
    if (start) {
      d.first = d.queued.load();
      d.sent_by_call = true;
      ++d.drivers;
    }
    const uint64_t queued = d.queued.fetch_add(1) + 1;
    d.active = true;
    if (d.settle_target != 0 && queued == d.settle_target) d.completed_cv.notify_one();
  }
  if (start) runOnCompletionThread(drive);
}

// Note [A lone call drives itself]
// A step whose collectives the lowering merged into one custom call (Note
// [One custom call for a step's collectives] in hvdlite/jax/merged_calls.py)
// makes one call a step, and XLA's executor then waits for its future on the
// thread that ran it (the step is small enough for its sequential mode). A
// driver on a completion thread then costs two wake-ups a step on the
// critical path: the driver's, and the waiting thread's once the driver
// completes the future. So when a call is the only one pending, no driver
// runs, and the previous burst was one call, the handler's own thread runs
// the cycles, as hvdlite.torch's synchronize() does, and returns a completed
// future. It is bounded (kDriveHereFor): a call that another call of its
// step on this rank must follow before peers can complete it (only when the
// burst size was guessed wrong) hands over to a driver after that, as do
// calls that came meanwhile; the burst size learnt then sends the next
// bursts to the driver.
bool driveHere() {
  Driver& d = driver();
  std::lock_guard<std::mutex> lock(d.mutex);
  if (d.active || d.expected > 1 || d.pending.load() != 1) return false;
  d.active = true;
  ++d.drivers;
  d.here_first = d.queued.fetch_add(1);
  return true;
}

void callCompletedHere() {
  Driver& d = driver();
  std::lock_guard<std::mutex> lock(d.mutex);
  d.pending.fetch_sub(1);
  if (d.sleeping && d.pending.load() == 0) d.completed_cv.notify_one();
}

void doneDrivingHere() {
  Driver& d = driver();
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    d.expected = d.queued.load() - d.here_first;
    start = d.pending.load() > 0 || !d.completed.empty();
    d.active = start;
    if (start) {
      d.first = d.queued.load();
      d.sent_by_call = false;
      ++d.drivers;
    }
  }
  if (start) runOnCompletionThread(drive);
}

void callCompleted(std::function<void()> report) {
  Driver& d = driver();
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    d.completed.push_back(std::move(report));
    d.completed_count.fetch_add(1);
    d.pending.fetch_sub(1);
    if (!d.active) {
      start = d.active = true;
      d.first = d.queued.load();
      d.sent_by_call = false;
      ++d.drivers;
    } else if (d.sleeping && d.pending.load() == 0) {
      d.completed_cv.notify_one();
    }
  }
  if (start) runOnCompletionThread(drive);
}

}  // namespace hvdlite::jax_ffi
