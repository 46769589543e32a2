#include "core/entry_pool.h"

#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

namespace hvdlite::core {
namespace {

// Note [Entries kept for reuse]
// Every tensor of every step was a new TensorEntry, a new name buffer and a
// new shape buffer, allocated on the framework's thread at submission and
// freed on the background thread once it completed: six heap calls a
// tensor, and frees of another thread's blocks, which glibc's per-thread
// caches do not serve (the framework thread's malloc then takes the arena
// path, the background thread's free consolidates). So the executor hands
// completed entries back here, reset, and a submission takes one back, name
// and shape buffers included (api/request.cc assigns into them). Up to
// kMaxKeptEntries are kept (a step of 1,000 tensors; more are freed), for
// the whole process: entries carry nothing of a runtime once reset, so a
// re-initialised runtime reuses them too. The reset runs on the thread that
// completed the entry, outside the lock, so that what the callback and the
// allocator held (a handle, a framework's buffers, CUDA events) is released
// where and when it was before. The pool is never destroyed: a background
// thread may still complete entries while static objects are destroyed at
// exit.
constexpr size_t kMaxKeptEntries = 1024;

struct Pool {
  std::mutex mutex;
  std::vector<TensorEntryPtr> kept;
  const TensorEntry defaults{};  // what reset() gives each plain member
};

Pool& pool() {
  static Pool* const instance = new Pool();  // never destroyed: see the Note
  return *instance;
}

// How many members the aggregate T has: the most initializers its braces
// take (members past them get their defaults), counted with a value that
// converts to any type.
struct AnyMember {
  template <typename T>
  operator T() const;  // never defined: only asked whether it converts
};
template <typename T, typename... Members>
constexpr auto bracesTake(int) -> decltype(T{std::declval<Members>()...}, true) {
  return true;
}
template <typename T, typename... Members>
constexpr bool bracesTake(...) {
  return false;
}
template <typename T, typename... Members>
constexpr size_t memberCount() {
  if constexpr (bracesTake<T, Members..., AnyMember>(0)) {
    return memberCount<T, Members..., AnyMember>();
  } else {
    return sizeof...(Members);
  }
}

// Note [Resetting an entry member by member]
// Resetting a kept entry as `entry = TensorEntry()` built a whole default
// entry (strings, vectors, std::functions, shared_ptrs), moved each member
// across and destroyed the temporary: ~300 instructions a tensor on every
// small collective's path (callgrind, bench/call_profile.py). Assigning each
// member its default is a store for most, and the vectors and strings keep
// their buffers for the next submission (api/request.cc assigns into them).
// A member added to TensorEntry must be reset here too: the static_assert
// counts them and fails the build until it is.
void reset(TensorEntry& e, const TensorEntry& d) {
  static_assert(std::is_aggregate_v<TensorEntry> && memberCount<TensorEntry>() == 30,
                "TensorEntry's members changed: reset the new one here, then update the count");
  // e.name is kept: buildEntry compares before it copies (Note [A kept
  // entry's name]).
  e.op = d.op;
  e.reduce_op = d.reduce_op;
  e.dtype = d.dtype;
  e.shape.clear();
  e.input = d.input;
  e.output = d.output;
  e.output_bytes = d.output_bytes;
  e.root_rank = d.root_rank;
  e.prescale = d.prescale;
  e.postscale = d.postscale;
  e.splits.clear();
  e.process_set_id = d.process_set_id;
  e.device = d.device;
  e.ready_event = d.ready_event;
  e.stream = d.stream;
  e.owned_ready_event.reset();
  e.done_event.reset();
  e.sequence = d.sequence;
  e.group.clear();
  e.group_size = d.group_size;
  e.process_set_ranks.clear();
  e.removed_process_set_id = d.removed_process_set_id;
  e.call_site = d.call_site;
  e.caller_waits = d.caller_waits;
  e.allocate = nullptr;
  e.callback = nullptr;
  e.output_shape.clear();
  e.received_splits.clear();
  e.result_value = d.result_value;
}

// Note [A kept entry's name]
// A loop that submits the same tensor again and again (a synchronous
// allreduce_ of a metric, a benchmark) gets back, from this thread's own
// kept entries, the very entry its last call completed. Clearing its name
// here made api/request.cc copy the name in again on every call (a string
// replace: ~76 instructions of a 4-byte allreduce_, callgrind); kept, the
// name is compared and copied only when it differs. Only buildEntry takes
// kept entries (newEntry), and it always sets the name.

// Note [A thread's own kept entries]
// A synchronous collective takes its entry on the calling thread, and that
// thread, running the cycle itself (Note [Cycles on the waiting thread] in
// runtime_cycles.cc), hands it back: the shared pool's lock twice a call,
// four atomic instructions on a path of a microsecond. So each thread keeps
// up to kThreadKept entries of its own ahead of the shared pool, without a
// lock. Entries completed on a thread that submits none (the background
// thread, for asynchronous submissions) reach the shared pool once its own
// few are kept, as before. A thread's own go to the shared pool when it
// exits; after that (its thread_local objects destroyed), it uses the shared
// pool alone.
constexpr size_t kThreadKept = 8;

thread_local bool thread_kept_gone = false;  // trivially destroyed: readable until the thread ends

struct ThreadKept {
  std::vector<TensorEntryPtr> kept;
  ThreadKept() { kept.reserve(kThreadKept); }
  ~ThreadKept() {
    thread_kept_gone = true;
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    for (auto& entry : kept) {
      if (p.kept.size() >= kMaxKeptEntries) break;
      p.kept.push_back(std::move(entry));
    }
  }  // frees what did not fit
  ThreadKept(const ThreadKept&) = delete;
  ThreadKept& operator=(const ThreadKept&) = delete;
};

// This thread's kept entries; null once they are gone (the thread is ending).
std::vector<TensorEntryPtr>* threadKept() {
  if (thread_kept_gone) return nullptr;
  thread_local ThreadKept own;
  return &own.kept;
}

}  // namespace

TensorEntryPtr newEntry() {
  if (auto* own = threadKept(); own && !own->empty()) {
    TensorEntryPtr entry = std::move(own->back());
    own->pop_back();
    return entry;
  }
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    if (!p.kept.empty()) {
      TensorEntryPtr entry = std::move(p.kept.back());
      p.kept.pop_back();
      return entry;
    }
  }
  return std::make_unique<TensorEntry>();
}

void keepEntries(std::vector<TensorEntryPtr>& entries) {
  Pool& p = pool();
  std::vector<TensorEntryPtr>* own = threadKept();
  bool for_shared = false;
  for (auto& entry : entries) {
    if (!entry) continue;
    reset(*entry, p.defaults);
    if (own && own->size() < kThreadKept) {
      own->push_back(std::move(entry));
    } else {
      for_shared = true;
    }
  }
  if (for_shared) {
    std::lock_guard<std::mutex> lock(p.mutex);
    for (auto& entry : entries) {
      if (p.kept.size() >= kMaxKeptEntries) break;
      if (entry) p.kept.push_back(std::move(entry));
    }
  }
  entries.clear();  // frees what did not fit, outside the lock
}

}  // namespace hvdlite::core
