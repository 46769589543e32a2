// The call step that both executors share (Note [One executor shape]): given
// the buffers, wherever they live, run the collective on the process set's
// communicator and tell the entry what it learnt (its output's shape, the
// rows each rank sent).
#pragma once

#include "core/collective_math.h"
#include "core/tensor_entry.h"
#include "core/timeline.h"
#include "transport/communicator.h"

namespace hvdlite::core {

// Note [One executor shape]
// Both executors pack, call and unpack; they differ in where buffers live,
// and only the call is the same code. Executor (host memory) packs through
// the communicator (allreduceGathered: shared memory packs straight into its
// segment, in pipelined chunks) and allocates outputs as it likes;
// DeviceExecutor (GPU memory) packs on the device stream in one batched copy,
// makes every rank agree that each could allocate before any collective
// (Note [Allocation failures] in device_executor.cc), and folds scaling into
// NCCL's reduction. One template over "where the buffer lives" would need a
// hook for each of these, and read worse than the two files; so each
// executor keeps its packing and memory, and calls these with what it found.
// A device communicator takes device pointers through the same calls.

// An allgather of `r` from `in` (null on a rank that joined) into `out`
// (layout.total bytes); the caller tells the entry its output shape.
void allgatherInto(const Response& r, const AllgatherLayout& layout, const void* in, void* out,
                   transport::Communicator& comm, Timeline& timeline, const char* activity);

// Whether two byte ranges share a byte.
bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes);

// An alltoall of `e`'s input into `out`, laid out as `layout` says.
void alltoallInto(const Response& r, const AlltoallLayout& layout, TensorEntry& e, void* out,
                  transport::Communicator& comm, Timeline& timeline, const char* activity);

}  // namespace hvdlite::core
