// One collective a framework asked for: what to do, on which memory, and whom
// to tell when it is done. Created by a binding, owned by the TensorQueue
// until its response executes, then handed to its callback.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/types.h"
#include "core/call_site.h"
#include "core/status.h"

namespace hvdlite::core {

struct TensorEntry;

// Allocates the output of an operation whose output size is not the input's
// (allgather, alltoall, reducescatter). Called with the output shape on the
// background thread once negotiation decided it, or, for a CUDA
// reducescatter, on the caller's thread at enqueue; returns memory that stays
// valid until the callback has run. Must not block on the caller's thread.
using OutputAllocator = std::function<void*(const std::vector<int64_t>& shape)>;

// Runs on the background thread once, with the final status. Must be quick and
// must not call back into the runtime.
using Callback = std::function<void(TensorEntry& entry, const Status& status)>;

struct TensorEntry {
  std::string name;
  OpType op = OpType::kAllreduce;
  ReduceOp reduce_op = ReduceOp::kSum;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  const void* input = nullptr;
  // allreduce, broadcast: where the result goes (may equal input: in place).
  // allgather, alltoall, reducescatter: the caller's buffer of output_bytes,
  // or null for one the binding's allocate gives.
  void* output = nullptr;
  int64_t output_bytes = 0;
  int32_t root_rank = 0;  // broadcast: GLOBAL rank as the user gave it
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> splits;  // alltoall; empty = split the first dimension evenly
  int32_t process_set_id = 0;
  int32_t device = -1;
  // CUDA tensors (Note [Device ordering] in transport/device_communicator.h):
  // the framework's cudaEvent_t recorded once the input was written (null:
  // the runtime records one on `stream` at enqueue), and the cudaStream_t
  // the tensor was submitted on (null: the legacy default stream), which
  // waits for the result when it is asked for, as the asking stream does.
  void* ready_event = nullptr;
  void* stream = nullptr;
  // The event the runtime recorded at enqueue when the binding gave none
  // (Note [Ready at enqueue]); back to its pool with the entry.
  std::shared_ptr<void> owned_ready_event;
  // The done event of the device batch that ran it (Note [Completion on the
  // consumer's stream] in transport/device_communicator.h), set before the
  // callback: the stream that reads the result waits on it.
  std::shared_ptr<void> done_event;
  uint64_t sequence = 0;  // enqueue order on this rank (Note [One wait per stream])
  std::string group;  // grouped allreduce: members share a group name and size
  int32_t group_size = 0;
  std::vector<int64_t> process_set_ranks;  // add_process_set: the new set's global ranks
  int32_t removed_process_set_id = 0;      // remove_process_set: the set to remove
  // Where the user's program called it (Note [Call sites]); null: unknown.
  // Interned: it outlives the entry.
  const CallSite* call_site = nullptr;
  // Its submitter blocks until it completes (a TF or JAX op holding its
  // step): Note [Divergence] in coordinator.cc.
  bool caller_waits = false;
  OutputAllocator allocate;
  Callback callback;

  // Results, filled before the callback runs.
  std::vector<int64_t> output_shape;     // allgather, alltoall, reducescatter
  std::vector<int64_t> received_splits;  // alltoall
  int32_t result_value = -1;             // join: last rank; add_process_set: new id

  size_t elementCount() const {
    size_t n = 1;
    for (auto d : shape) n *= static_cast<size_t>(d);
    return n;
  }
  size_t byteSize() const { return elementCount() * dtypeSize(dtype); }
};

using TensorEntryPtr = std::unique_ptr<TensorEntry>;

}  // namespace hvdlite::core
