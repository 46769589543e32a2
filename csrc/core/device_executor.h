// Runs negotiated responses on CUDA tensors (response.device >= 0) through
// the process set's DeviceCommunicator (NCCL): the device counterpart of
// Executor's host path, ordered by events (Note [Device ordering]).
#pragma once

#include <cstdint>
#include <vector>

#include "core/fusion.h"
#include "core/tensor_entry.h"
#include "core/timeline.h"
#include "transport/device_communicator.h"

namespace hvdlite::core {

struct DeviceComms {
  transport::DeviceCommunicator* set = nullptr;  // the process set's
  // HVDLITE_HIERARCHICAL_ALLREDUCE (global set, several hosts with several
  // ranks each): this host's ranks on NCCL, and one rank per host on the CPU
  // transport. Null when not in use.
  transport::DeviceCommunicator* local = nullptr;
  transport::Communicator* cross = nullptr;
};

class DeviceExecutor {
 public:
  explicit DeviceExecutor(Timeline& timeline) : timeline_(timeline) {}

  // Queues `batch` on the device and makes each entry's stream wait for it;
  // returns without waiting for the GPU. `entries` is index-aligned with
  // batch.members; a null entry is a rank that joined (neutral values).
  void run(const Batch& batch, std::vector<TensorEntryPtr>& entries, const DeviceComms& comms);

 private:
  using Entries = std::vector<TensorEntryPtr>;
  void allreduce(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev);
  void hierarchicalAllreduce(const Batch& batch, Entries& entries, const DeviceComms& comms);
  void pack(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev, uint8_t* buffer,
            bool host_prescale);
  void unpack(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev, const uint8_t* buffer);
  void allgather(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev);
  void broadcast(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev);
  void alltoall(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev);
  void reducescatter(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev);
  // Runs finishReduction on a host copy of `count` device elements.
  void finishOnHost(transport::DeviceCommunicator& dev, void* data, size_t count, const Response& r);

  Timeline& timeline_;
  std::vector<uint8_t> host_;  // staging for host round trips
};

}  // namespace hvdlite::core
