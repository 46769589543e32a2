#include "core/tensor_queue.h"

#include <sched.h>

#include <algorithm>
#include <iterator>

#include "common/errors.h"

namespace hvdlite::core {

// Note [In-flight entries hashed]
// Every tensor of a step is looked up by name twice here, at add() (the
// duplicate check) and at take(), and a step's names share long prefixes
// ("model.layers.11.mlp.weight", "step.200x16KiB.17"): a search tree of 200
// names compared some 8 of them byte by byte each time (memcmp was the
// background thread's largest cost after the copies and the reduction,
// callgrind, bench/step_profile.py). A hash map hashes the name once and
// compares it once. Nothing here needs the names in order but the drains
// (failure and removal paths), which sort what they return, so that entries
// still fail in name order.
constexpr size_t kExpectedInFlight = 1024;  // buckets for a large step: no rehash in it

TensorQueue::TensorQueue() { entries_.reserve(kExpectedInFlight); }

namespace {

void sortByName(std::vector<TensorEntryPtr>& entries) {
  std::sort(entries.begin(), entries.end(),
            [](const TensorEntryPtr& a, const TensorEntryPtr& b) { return a->name < b->name; });
}

}  // namespace

// Note [No entry after the last drain]
// A framework thread checks that the runtime still runs before it adds an
// entry, but the background thread can fail (or shut down) between that
// check and the add: it drains the queue, completes every entry with the
// failure and exits. An entry added after that drain would never complete,
// and its caller would wait forever (a CUDA runtime's waiting thread runs no
// cycles of its own). So the drain closes the queue under the same mutex as
// add(), and an add() that comes after it is refused: the caller fails with
// the failure instead. The fake-GPU hung-kernel test caught it, about one run
// in ten with four CPU hogs: the victim rank's enqueue recorded its ready
// event while the watchdog's abort failed every entry.
bool TensorQueue::add(TensorEntryPtr&& entry, int rank, bool wake) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return false;
  auto [slot, inserted] = nodes_.insertUnique(entries_, entry->name);
  if (!inserted) {
    throw InvalidArgument("a collective named '" + entry->name + "' is already in progress on rank " +
                          std::to_string(rank) +
                          "; names must be unique among operations in flight. Wait for the first "
                          "one (synchronize its handle) or pass a different name=.");
  }
  const TensorEntry* raw = entry.get();
  if (entry->caller_waits) caller_waits_.fetch_add(1, std::memory_order_relaxed);
  slot->second = std::move(entry);
  in_flight_.store(entries_.size(), std::memory_order_release);
  fresh_.push_back(raw);
  if (wake) {
    wake_entry_ = true;
    added_.notify_one();
  }
  return true;
}

// Note [Popping new entries without allocating]
// Every cycle pops the entries added since the last one, for each process
// set. std::stable_partition allocates a temporary buffer on every call (a
// malloc and a free per cycle, a tenth of the queue's work on a 4-byte
// allreduce, callgrind), so the entries are split by hand: usually all of
// them belong to the set asked for, and the two vectors just swap buffers
// (both keep their capacity from cycle to cycle); otherwise those of the
// set are copied out and the rest closed up in place, both in submission order.
void TensorQueue::popNew(int32_t process_set_id, std::vector<const TensorEntry*>& out) {
  out.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  if (fresh_.empty()) return;
  const auto other_set = [&](const TensorEntry* e) { return e->process_set_id != process_set_id; };
  if (std::none_of(fresh_.begin(), fresh_.end(), other_set)) {
    out.swap(fresh_);  // fresh_ is now `out`'s old buffer, cleared above
    return;
  }
  auto kept = fresh_.begin();
  for (const TensorEntry* e : fresh_) {
    if (other_set(e)) *kept++ = e;
    else out.push_back(e);
  }
  fresh_.erase(kept, fresh_.end());
}

TensorEntryPtr TensorQueue::take(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  return takeLocked(name);
}

TensorEntryPtr TensorQueue::takeLocked(const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return nullptr;
  TensorEntryPtr entry = remove(it);
  fresh_.erase(std::remove(fresh_.begin(), fresh_.end(), entry.get()), fresh_.end());
  return entry;
}

TensorEntryPtr TensorQueue::remove(EntryMap::iterator it) {
  auto node = nodes_.extract(entries_, it);
  TensorEntryPtr entry = std::move(node.mapped());
  nodes_.keep(std::move(node));
  in_flight_.store(entries_.size(), std::memory_order_release);
  if (entry->caller_waits) caller_waits_.fetch_sub(1, std::memory_order_relaxed);
  return entry;
}

std::vector<TensorEntryPtr> TensorQueue::drainAndClose() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
  std::vector<TensorEntryPtr> out;
  for (auto& [name, entry] : entries_) out.push_back(std::move(entry));
  entries_.clear();
  in_flight_.store(0, std::memory_order_release);
  fresh_.clear();
  caller_waits_.store(0, std::memory_order_relaxed);
  sortByName(out);
  return out;
}

std::vector<TensorEntryPtr> TensorQueue::drainProcessSet(int32_t process_set_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TensorEntryPtr> out;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second->process_set_id != process_set_id) {
      ++it;
      continue;
    }
    fresh_.erase(std::remove(fresh_.begin(), fresh_.end(), it->second.get()), fresh_.end());
    auto next = std::next(it);
    out.push_back(remove(it));
    it = next;
  }
  sortByName(out);
  return out;
}

// Note [Polling after activity]
// The kernel here may give a woken thread its core only at the next
// scheduler tick (4 ms) when another thread is running there, and a
// framework that just got a result usually submits the next tensor within
// microseconds. So right after a cycle that did work, the background thread
// looks at the queue in a loop for a short while, calling sched_yield()
// between looks so that a thread waiting for this core (the framework's)
// runs at once; only then does it sleep on the condition variable.
bool TensorQueue::waitForWork(Clock::time_point deadline, Clock::duration poll_for) {
  auto poll_until = std::min(deadline, Clock::now() + poll_for);
  while (Clock::now() < poll_until) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (wake_entry_ || woken_) {
        wake_entry_ = woken_ = false;
        return true;
      }
    }
    sched_yield();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  bool work = added_.wait_until(lock, deadline, [&] { return wake_entry_ || woken_; });
  wake_entry_ = woken_ = false;
  return work;
}

void TensorQueue::waitForWake(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  added_.wait_until(lock, deadline, [&] { return woken_ || wake_entry_; });
  woken_ = wake_entry_ = false;
}

void TensorQueue::wake() {
  std::lock_guard<std::mutex> lock(mutex_);
  woken_ = true;
  added_.notify_one();
}

size_t TensorQueue::inFlight() const { return in_flight_.load(std::memory_order_acquire); }

}  // namespace hvdlite::core
