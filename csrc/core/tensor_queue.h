// Entries submitted by framework threads, keyed by tensor name, waiting for
// the background thread to negotiate and execute them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/node_pool.h"
#include "core/tensor_entry.h"

namespace hvdlite::core {

using Clock = std::chrono::steady_clock;

// Thread-safe: add() runs on any framework thread; the rest on whichever
// thread runs the cycle (the background thread, or a framework thread that
// waits for a result: Note [Cycles on the waiting thread] in runtime_cycles.cc).
class TensorQueue {
 public:
  TensorQueue();

  // Takes ownership and returns true; returns false, leaving `entry` with the
  // caller, once drainAndClose() ran (Note [No entry after the last drain]).
  // Throws InvalidArgument if an entry with the same name is in flight (a
  // duplicate would corrupt the first one's negotiation).
  // `wake`: end a waitForWork() at once; false when the submitting thread
  // will drive the cycle itself (Note [Cycles on the waiting thread]).
  bool add(TensorEntryPtr&& entry, int rank, bool wake = true);

  // Entries added since the last call, in submission order, for one process
  // set, into `out` (cleared first; the caller reuses it: one allocation less
  // a cycle). They stay owned by the queue (in flight) until take().
  void popNew(int32_t process_set_id, std::vector<const TensorEntry*>& out);

  // Removes an in-flight entry for execution; nullptr if this rank has none
  // of that name (it has joined and contributes neutral values).
  TensorEntryPtr take(const std::string& name);
  // take(name_of(i)) for i < count, appended to `out`, under one lock (a
  // fused batch's members).
  template <typename NameOf>
  void takeEach(size_t count, NameOf name_of, std::vector<TensorEntryPtr>& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < count; ++i) out.push_back(takeLocked(name_of(i)));
  }

  // Removes the entries of one process set (it was removed), in name order.
  std::vector<TensorEntryPtr> drainProcessSet(int32_t process_set_id);

  // Removes every in-flight and new entry, in name order, and refuses every
  // later add() (shutdown, fatal error: nothing runs cycles any more).
  std::vector<TensorEntryPtr> drainAndClose();

  // Waits until an entry is added with `wake`, wake() is called, or
  // `deadline` passes, whichever is first; true unless the deadline passed.
  // For the first `poll_for` it polls, yielding the core between looks,
  // instead of sleeping: see Note [Polling after activity].
  bool waitForWork(Clock::time_point deadline, Clock::duration poll_for);
  void wake();  // ends a waitForWork or waitForWake early
  // Waits until wake(), an entry added with `wake`, or `deadline`, whichever
  // is first (another thread is running cycles: the waiter looks whether it
  // still is; Note [The background thread while a caller drives]).
  void waitForWake(Clock::time_point deadline);

  size_t inFlight() const;

  // Note [Divergence] in coordinator.cc: whether some thread of this rank is
  // blocked until a collective completes: one between beginWait() and
  // endWait() (synchronize(), a blocking collective, join(), barrier()), or
  // an in-flight entry whose caller_waits says its submitter waits for it.
  bool blocked() const {
    return waiting_threads_.load(std::memory_order_relaxed) > 0 ||
           caller_waits_.load(std::memory_order_relaxed) > 0;
  }
  void beginWait() { waiting_threads_.fetch_add(1, std::memory_order_relaxed); }
  void endWait() { waiting_threads_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  using EntryMap = std::unordered_map<std::string, TensorEntryPtr>;
  // Removes `it` from entries_ (under mutex_), keeping the counts.
  TensorEntryPtr remove(EntryMap::iterator it);
  TensorEntryPtr takeLocked(const std::string& name);  // take(), under mutex_

  mutable std::mutex mutex_;
  std::condition_variable added_;
  bool woken_ = false;
  bool closed_ = false;  // drainAndClose() ran
  bool wake_entry_ = false;  // an entry added with `wake` since the last waitForWork
  // Every in-flight entry, by name: hashed (Note [In-flight entries hashed]).
  EntryMap entries_;
  // Nodes of removed entries, for the next adds (Note [Map nodes kept for reuse]).
  NodePool<EntryMap> nodes_;
  // entries_.size(), changed under mutex_ and read without it: inFlight() is
  // asked several times on every small collective's path.
  std::atomic<size_t> in_flight_{0};
  std::vector<const TensorEntry*> fresh_;           // not yet popped by the controller
  std::atomic<int> waiting_threads_{0};
  std::atomic<int> caller_waits_{0};  // in-flight entries with caller_waits (changed under mutex_)
};

}  // namespace hvdlite::core
