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
  void doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  void doAllgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override;
  void doBroadcast(void* data, size_t bytes, int root) override;
  void doAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override;
  void doReducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override;
  void doAllreduceScaled(void* data, size_t count, DataType dtype, double factor) override;
  void doReducescatterScaled(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                             double factor) override;
};

}  // namespace hvdlite::transport::cuda
