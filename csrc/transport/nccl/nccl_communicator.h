// A process set's collectives on CUDA memory through one NCCL communicator,
// created once (at the set's first device response) from a unique id that
// set rank 0 sends over the set's CPU communicator.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/device_communicator.h"
#include "transport/nccl/libraries.h"

namespace hvdlite::transport::nccl {

// Device memory allocated and freed in stream order on the NCCL stream
// (cudaMallocAsync/cudaFreeAsync): growing it never waits for the GPU.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // Grows to at least `bytes`; null when the GPU is out of memory.
  void* reserve(const CudaApi& cuda, size_t bytes, cudaStream_t stream);

 private:
  void release();
  const CudaApi* cuda_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

using LibraryLoader = std::function<std::shared_ptr<const GpuLibraries>()>;
// The NCCL stream of a device (one per GPU, shared by its communicators);
// called with that device current.
using StreamSource = std::function<cudaStream_t(int device)>;

class NcclCommunicator final : public DeviceCommunicator {
 public:
  // `load` is called at the first useDevice(); `cpu` must outlive this, and
  // so must the streams. `timeout_seconds` bounds creation and host waits.
  NcclCommunicator(LibraryLoader load, StreamSource streams, Communicator& cpu, double timeout_seconds)
      : load_(std::move(load)), streams_(std::move(streams)), cpu_(cpu), timeout_seconds_(timeout_seconds) {}
  // ncclCommDestroy once every queued batch finished; else ncclCommAbort.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return cpu_.rank(); }
  int size() const override { return cpu_.size(); }
  int globalRank(int r) const override { return cpu_.globalRank(r); }
  std::string describe() const override { return "nccl"; }

  void useDevice(int device) override;
  int device() const override { return device_; }
  int callerDevice() override;
  void restoreDevice(int device) override;
  void waitFor(void* ready_event, void* stream) override;
  void recordDone(const std::string& what) override;
  void signalDone(void* stream) override;
  void* reserve(size_t bytes, int slot) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void* stageToHost(const void* device, size_t bytes) override;
  void copyFromHost(void* device, const void* host, size_t bytes) override;
  int firstFailedRank(bool ok) override;
  std::string health(double timeout_seconds) override;
  void abort() override;

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
  // Runs fn(comm) under comm_mutex_ (abort() may come from the watchdog),
  // then waits out ncclInProgress (non-blocking communicators) and checks.
  template <typename Fn>
  void call(const std::string& what, Fn&& fn);
  void settle(ncclResult_t result, const std::string& what);
  // Polls `event` until it fired, backing off; throws on abort or timeout.
  void await(cudaEvent_t event, const char* what);
  void* pinned(size_t bytes);  // the staging buffer, free of earlier copies
  bool drained(double seconds);  // every recorded batch finished within `seconds`
  std::string where() const;     // "rank R (GPU d)"
  ncclResult_t reduceScatterWith(ncclComm_t comm, const void* in, void* out, const std::vector<size_t>& counts,
                                 DataType dtype, ncclRedOp_t op);
  // A premultiplied-sum operator for `factor` in dtype's representation.
  ncclResult_t scaledSum(ncclComm_t comm, DataType dtype, double factor, ncclRedOp_t* op);
  const CudaApi& cuda() const { return libs_->cuda(); }
  const NcclApi& api() const { return libs_->nccl(); }

  LibraryLoader load_;
  StreamSource streams_;
  Communicator& cpu_;
  const double timeout_seconds_;
  std::shared_ptr<const GpuLibraries> libs_;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  // A wait captures an event's last record when it is queued, so one event
  // serves every ready wait, and one every staging copy.
  cudaEvent_t ready_ = nullptr;
  cudaEvent_t staged_ = nullptr;
  bool staging_in_flight_ = false;  // staged_ marks a copy still using pinned_
  void* pinned_ = nullptr;          // cudaMallocHost'd staging memory
  size_t pinned_bytes_ = 0;
  DeviceBuffer buffers_[2];

  std::mutex comm_mutex_;  // comm_ and aborted_ against the watchdog's abort()
  ncclComm_t comm_ = nullptr;
  bool ready_to_use_ = false;  // creation finished
  std::atomic<bool> aborted_{false};

  // Batches queued and not known to be finished, oldest first (the watchdog's).
  struct Pending {
    cudaEvent_t done;
    std::chrono::steady_clock::time_point queued;
    std::string what;
  };
  std::mutex done_mutex_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> spare_events_;
  cudaEvent_t last_done_ = nullptr;
};

// NCCL's type for a core dtype (bool travels as uint8) and its reduction
// (bool sum = logical or = max, product = and = min).
ncclDataType_t ncclType(DataType dtype);
ncclRedOp_t ncclOp(DataType dtype, ReduceOp op);

}  // namespace hvdlite::transport::nccl
