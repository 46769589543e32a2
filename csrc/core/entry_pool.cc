#include "core/entry_pool.h"

#include <mutex>
#include <string>
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
};

Pool& pool() {
  static Pool* const instance = new Pool();  // never destroyed: see the Note
  return *instance;
}

// Every field back to its default, keeping the name's and shape's buffers.
void reset(TensorEntry& entry) {
  std::string name = std::move(entry.name);
  std::vector<int64_t> shape = std::move(entry.shape);
  entry = TensorEntry();
  name.clear();
  shape.clear();
  entry.name = std::move(name);
  entry.shape = std::move(shape);
}

}  // namespace

TensorEntryPtr newEntry() {
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
  bool any = false;
  for (auto& entry : entries) {
    if (!entry) continue;
    reset(*entry);
    any = true;
  }
  if (any) {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    for (auto& entry : entries) {
      if (p.kept.size() >= kMaxKeptEntries) break;
      if (entry) p.kept.push_back(std::move(entry));
    }
  }
  entries.clear();  // frees what did not fit, outside the lock
}

}  // namespace hvdlite::core
