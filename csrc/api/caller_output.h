// Outputs sized by negotiation written into a buffer the caller gave
// (Note [Outputs into the caller's buffer] in caller_output.cc).
#pragma once

#include "core/runtime.h"
#include "core/tensor_entry.h"

namespace hvdlite::api {

// True for an allgather, alltoall or reducescatter submitted with an output
// of output_bytes > 0.
bool writesIntoCallerBuffer(const core::TensorEntry& entry);

// Makes `entry` (whose allocate and callback are already set) write its
// result into entry.output, and fail, once done, when the result's size is
// not entry.output_bytes.
void intoCallerBuffer(core::TensorEntry& entry, core::Runtime& runtime);

}  // namespace hvdlite::api
