#include "jax/call_driver.h"

#include <sched.h>

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
// to a completion thread (timestamps in the handler, 2 ranks on 2 cores,
// p10 of 290 steps at load 10; jax 0.10.2): the Python thread runs the step
// inside its jit call and, once XLA has started every instruction, blocks in
// it until the step's last future completes (the call returns only then).
// XLA:CPU starts the 100 copies (allreduce writes in place, into a copy of
// the argument) and 100 calls from that thread and two of its Eigen pool's,
// splitting the ready instructions between them: the first call ran 70 us
// after the jit call began (JAX's dispatch of 100 arguments), the last
// returned at 250 us (a call costs about 1 us, its enqueue 0.6 of that).
// The first completion came at 800 us and the last at 930: the first enqueue
// had woken the background thread, whose first cycle took the few calls
// queued by then and later ones the rest; then each of the 100 completions
// was one task for a completion thread (an allocation, a lock and a wake-up
// each, on the thread that runs the cycles). The Python thread got the
// step's results at 1,060 us, 130 us after the last future completed.
// So, as hvdlite.torch's synchronize() runs the cycle on the thread that
// waits, a call here queues its requests without waking the background
// thread (HVDLITE_REQUEST_NO_WAKE), and the first call of a burst sends one
// driver, a task on a completion thread (Note [Completion threads]), which
//   1. lets the burst finish: it waits while calls keep coming, until none
//      came for kSettle (at most kMaxSettle), so that the step's calls go
//      to one negotiation;
//   2. runs the cycles itself (hvdlite_drive_cycles) until some call has
//      completed, or, when another thread is running them, waits for the
//      completions;
//   3. tells XLA of every call completed so far, one batch, on its own
//      thread: no hand-off to another thread per call.
// It goes on until no call is pending. Telling XLA may run the rest of the
// step on this thread, which may block (an io_callback waiting for its
// collective), so the driver stands down while it reports: a call queued or
// completed meanwhile sends a new driver, and the blocked one leaves once it
// returns. The background thread still runs the cycles when nobody drives
// (the driver hands them back when it stops, or stalls: Note [Backing off a
// stall] in core/runtime_cycles.cc).
constexpr auto kSettle = std::chrono::microseconds(10);
constexpr auto kMaxSettle = std::chrono::microseconds(300);
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

void settle(Driver& d) {
  const auto start = std::chrono::steady_clock::now();
  auto last_change = start;
  uint64_t seen = d.queued.load();
  for (;;) {
    sched_yield();
    const auto now = std::chrono::steady_clock::now();
    const uint64_t queued = d.queued.load();
    if (queued != seen) {
      seen = queued;
      last_change = now;
    }
    if (now - last_change >= kSettle || now - start >= kMaxSettle) return;
  }
}

void drive() {
  Driver& d = driver();
  settle(d);
  std::vector<std::function<void()>> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(d.mutex);
      batch.swap(d.completed);
      d.completed_count = 0;
      if (batch.empty() && d.pending.load() == 0) {
        d.active = false;
        return;
      }
      if (!batch.empty()) d.active = false;  // stands down while it reports
    }
    if (!batch.empty()) {
      for (auto& report : batch) report();
      batch.clear();
      std::lock_guard<std::mutex> lock(d.mutex);
      if (d.active || d.idle()) return;  // another driver took over, or nothing is left
      d.active = true;
      continue;
    }
    if (hvdlite_drive_cycles(readyToReport, &d) == 1) continue;
    std::unique_lock<std::mutex> lock(d.mutex);
    d.sleeping = true;
    d.completed_cv.wait_for(lock, kRecheck, [&d] { return !d.completed.empty() || d.pending.load() == 0; });
    d.sleeping = false;
  }
}

}  // namespace

void callQueued() {
  Driver& d = driver();
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    d.pending.fetch_add(1);
    d.queued.fetch_add(1);
    start = !d.active;
    d.active = true;
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
    } else if (d.sleeping) {
      d.completed_cv.notify_one();
    }
  }
  if (start) runOnCompletionThread(drive);
}

}  // namespace hvdlite::jax_ffi
