// Tensor entries kept for reuse from one step to the next (Note [Entries kept
// for reuse] in entry_pool.cc).
#pragma once

#include <vector>

#include "core/tensor_entry.h"

namespace hvdlite::core {

// An entry in its default state but for its name: a kept one (with its
// last name, which the caller replaces: Note [A kept entry's name] in
// entry_pool.cc, and its shape's buffer, empty) or a new one. Thread-safe.
TensorEntryPtr newEntry();

// Resets each non-null entry of `entries` (its callback, allocator and
// events are dropped here, on the calling thread), keeps it for newEntry()
// up to a limit, frees the rest, and clears `entries`. Thread-safe.
void keepEntries(std::vector<TensorEntryPtr>& entries);

}  // namespace hvdlite::core
