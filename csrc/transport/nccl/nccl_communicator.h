// A process set's collectives on CUDA memory through one NCCL communicator,
// created once (at the set's first device response) from a unique id that
// set rank 0 sends over the set's CPU communicator.
#pragma once

#include <functional>
#include <memory>

#include "transport/device_communicator.h"
#include "transport/nccl/libraries.h"

namespace hvdlite::transport::nccl {

// cudaMalloc'd memory, freed by the destructor.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // Grows to at least `bytes`; `stream`'s queued work is finished first,
  // since it may still use the old memory.
  void* reserve(const CudaApi& cuda, size_t bytes, cudaStream_t stream);

 private:
  void release();
  const CudaApi* cuda_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

using LibraryLoader = std::function<std::shared_ptr<const GpuLibraries>()>;

class NcclCommunicator final : public DeviceCommunicator {
 public:
  // `load` is called at the first useDevice(); `cpu` must outlive this.
  NcclCommunicator(LibraryLoader load, Communicator& cpu) : load_(std::move(load)), cpu_(cpu) {}
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return cpu_.rank(); }
  int size() const override { return cpu_.size(); }
  int globalRank(int r) const override { return cpu_.globalRank(r); }

  void useDevice(int device) override;
  int device() const override { return device_; }
  void waitFor(void* ready_event, void* stream) override;
  void signalDone(void* stream) override;
  void* reserve(size_t bytes, int slot) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copyToHost(void* host, const void* device, size_t bytes) override;
  void copyFromHost(void* device, const void* host, size_t bytes) override;

 private:
  // Communicator's hooks; arguments checked (Note [Checked entry points]).
  void doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  void doAllgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override;
  void doBroadcast(void* data, size_t bytes, int root) override;
  void doAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override;
  void doReducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override;
  // Barrier and messages go through the set's CPU communicator (Note [Device ordering]).
  void doBarrier() override { cpu_.barrier(); }
  std::vector<std::string> doGather(const std::string& mine, int root) override {
    return cpu_.gather(mine, root);
  }
  void doBroadcastMessage(std::string& message, int root) override { cpu_.broadcastMessage(message, root); }
  void doAllreduceScaled(void* data, size_t count, DataType dtype, double factor) override;
  void doReducescatterScaled(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                             double factor) override;

  void create(int device);
  void reduceScatterWith(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                         ncclRedOp_t op);
  // A premultiplied-sum operator for `factor` in dtype's representation.
  ncclRedOp_t scaledSum(DataType dtype, double factor);
  const CudaApi& cuda() const { return libs_->cuda(); }
  const NcclApi& api() const { return libs_->nccl(); }

  LibraryLoader load_;
  Communicator& cpu_;
  std::shared_ptr<const GpuLibraries> libs_;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  // One event serves every wait and signal: a wait captures the event's last
  // record when it is queued, so re-recording afterwards is safe.
  cudaEvent_t event_ = nullptr;
  ncclComm_t comm_ = nullptr;
  DeviceBuffer buffers_[2];
};

// NCCL's type for a core dtype (bool travels as uint8) and its reduction
// (bool sum = logical or = max, product = and = min).
ncclDataType_t ncclType(DataType dtype);
ncclRedOp_t ncclOp(DataType dtype, ReduceOp op);

}  // namespace hvdlite::transport::nccl
