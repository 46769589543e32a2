#include "jax/completion_threads.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace hvdlite::jax_ffi {
namespace {

// Note [Completion threads]
// Each thread, before it runs a task (which may block for as long as the
// step's next io_callback waits for its peers), makes sure that another
// thread is free for the tasks still queued, starting one when none is asleep
// or starting up. So a blocked task never holds up the others, while a burst
// of cheap tasks (the members of one fused batch) is served by the threads
// there are instead of one new thread each. A thread with nothing to do
// exits when kIdleThreads others already sleep, so the threads a burst
// started do not pile up.
constexpr size_t kIdleThreads = 2;

struct CompletionThreads {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::function<void()>> tasks;
  size_t idle = 0;      // threads asleep on `ready`
  size_t starting = 0;  // threads started that have not yet taken a task

  // Called with `mutex` held.
  void ensureAnotherThread() {
    if (tasks.empty() || idle > 0 || starting > 0) return;
    ++starting;
    std::thread([this] { serve(true); }).detach();
  }

  void serve(bool just_started) {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      if (just_started) {
        --starting;
        just_started = false;
      }
      if (tasks.empty()) {
        if (idle >= kIdleThreads) return;
        ++idle;
        ready.wait(lock, [this] { return !tasks.empty(); });
        --idle;
      }
      std::function<void()> task = std::move(tasks.front());
      tasks.pop_front();
      ensureAnotherThread();
      lock.unlock();
      task();
      lock.lock();
    }
  }
};

// Never destroyed: its threads may still be asleep on it when the process
// exits (they are detached, so nothing joins them).
CompletionThreads& threads() {
  static auto* instance = new CompletionThreads;
  return *instance;
}

}  // namespace

void runOnCompletionThread(std::function<void()> task) {
  CompletionThreads& pool = threads();
  std::lock_guard<std::mutex> lock(pool.mutex);
  pool.tasks.push_back(std::move(task));
  if (pool.idle > 0) {
    pool.ready.notify_one();
  } else {
    pool.ensureAnotherThread();
  }
}

}  // namespace hvdlite::jax_ffi
