// Checks a framework's request before anything is sent, in the caller's
// thread, so that bad arguments surface as ValueError where they were made.
#pragma once

#include "core/process_set.h"
#include "core/tensor_entry.h"

namespace hvdlite::core {

// Throws InvalidArgument naming the tensor, the argument and what to do.
// Normalises the entry for the wire: broadcast root becomes a process-set
// rank; alltoall gets explicit even splits when none were given; a join is
// named kJoinName.
// `set` is null when the entry's process set does not exist.
void validateEntry(TensorEntry& entry, const ProcessSet* set, int global_rank);

}  // namespace hvdlite::core
