// Runs negotiated responses on CUDA tensors (response.device >= 0) through
// the process set's DeviceCommunicator (NCCL): the device counterpart of
// Executor's host path (Note [One executor shape] in collective_calls.h),
// ordered by events (Note [Device ordering]).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/errors.h"

#include "core/fusion.h"
#include "core/tensor_entry.h"
#include "core/timeline.h"
#include "transport/device_communicator.h"

namespace hvdlite::core {

struct DeviceComms {
  // The process set's: NCCL, host-staged, or two levels (Note [Hierarchical
  // allreduce] in transport/two_level/device_two_level_communicator.cc); the
  // executor does not know which.
  transport::DeviceCommunicator* comm = nullptr;
  // This rank's GPU when neither the batch's entries nor a bound
  // communicator say (a rank that joined): Note [A rank's own GPU].
  int own_device = 0;
  // The batch runs on a framework thread (Note [Cycles on the waiting thread]
  // in runtime_cycles.cc), whose current device and capture mode are set back afterwards.
  bool restore_caller_device = false;
};

// Device memory for a batch ran out on some rank: only that batch fails
// (Note [Allocation failures]).
class DeviceAllocationError : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

class DeviceExecutor {
 public:
  explicit DeviceExecutor(Timeline& timeline) : timeline_(timeline) {}

  // Queues `batch` on the device and gives each entry the batch's done event
  // (Note [Completion on the consumer's stream]); returns without waiting for
  // the GPU. `entries` is index-aligned with
  // batch.members; a null entry is a rank that joined (neutral values).
  // Throws DeviceAllocationError, on every rank alike, when some rank could
  // not allocate the batch's device memory.
  void run(const Batch& batch, std::vector<TensorEntryPtr>& entries, const DeviceComms& comms);

 private:
  using Entries = std::vector<TensorEntryPtr>;
  // Note [Allocation failures]: a fusion buffer of `bytes` in `slot` of `dev`,
  // or null (with `failure` set) when this rank's GPU is out of memory.
  void* reserve(transport::DeviceCommunicator& dev, size_t bytes, int slot, bool& agree, std::string& failure);
  void* allocateOutput(TensorEntry& e, const std::vector<int64_t>& shape, std::string& failure);
  // Every rank of dev's set learns whether each could allocate; throws
  // DeviceAllocationError if one could not.
  void agree(transport::DeviceCommunicator& dev, const std::string& failure);
  void allreduce(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev);
  void pack(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev, uint8_t* buffer,
            bool host_prescale);
  void unpack(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev, const uint8_t* buffer);
  void allgather(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev);
  void broadcast(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev);
  void alltoall(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev);
  void reducescatter(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev);
  void fusedReducescatter(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev);
  // Runs finishReduction on a host copy of `count` device elements.
  void finishOnHost(transport::DeviceCommunicator& dev, void* data, size_t count, const Response& r);

  Timeline& timeline_;
  // Per communicator and slot: the fusion buffer size every rank of its set
  // is known to have (Note [Allocation failures]).
  std::map<const transport::DeviceCommunicator*, std::array<size_t, 2>> agreed_;
};

}  // namespace hvdlite::core
