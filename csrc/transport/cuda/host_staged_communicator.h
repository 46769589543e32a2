// HVDLITE_GPU_OPERATIONS=host: a process set's collectives on CUDA memory
// through the set's CPU communicator. Each collective copies its input to
// pinned host memory on the device stream (after the ready waits), waits for
// that copy by polling an event, runs on the CPU transport, and queues the
// copy of the result back; the done event follows it (Note [Device
// ordering]). For GPUs without NCCL, more ranks than GPUs (NCCL refuses two
// ranks of one communicator on one GPU), and tests.
#pragma once

#include <string>
#include <vector>

#include "transport/cuda/cuda_communicator.h"

namespace hvdlite::transport::cuda {

class HostStagedCommunicator final : public CudaCommunicator {
 public:
  using CudaCommunicator::CudaCommunicator;

  std::string describe() const override;

 private:
  // Communicator's and DeviceCommunicator's hooks (Note [Hook lists]).
  HVDLITE_COLLECTIVE_HOOKS;
  HVDLITE_SCALED_HOOKS;
};

}  // namespace hvdlite::transport::cuda
