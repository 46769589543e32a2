// CUDA events handed out for one record each and kept for reuse: the ready
// events recorded on framework streams at enqueue (Note [Ready at enqueue] in
// transport/device_communicator.h) and the done events of device batches
// (Note [Completion on the consumer's stream]).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/cuda/cuda_runtime.h"
#include "transport/device_communicator.h"

namespace hvdlite::transport::cuda {

class EventPool : public std::enable_shared_from_this<EventPool> {
 public:
  explicit EventPool(std::shared_ptr<const CudaRuntime> runtime) : runtime_(std::move(runtime)) {}
  ~EventPool();  // destroys the spare events
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // Thread-safe. Records an event of GPU `device` on `stream` (null: that
  // GPU's legacy default stream) and lends it out: it comes back here when
  // the last reference goes, and only then is recorded again, so a holder may
  // wait on it (cudaStreamWaitEvent) at any time. Leaves the calling thread's
  // current device as it was.
  DeviceEvent record(int device, cudaStream_t stream);

 private:
  cudaEvent_t take(int device);
  void give(int device, cudaEvent_t event);
  const CudaApi& cuda() const { return runtime_->api(); }

  std::shared_ptr<const CudaRuntime> runtime_;
  std::mutex mutex_;
  std::map<int, std::vector<cudaEvent_t>> spare_;  // by device
};

}  // namespace hvdlite::transport::cuda
