// The CUDA events recorded on framework streams at enqueue (Note [Ready at
// enqueue] in transport/device_communicator.h), kept for reuse.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/device_communicator.h"
#include "transport/nccl/libraries.h"

namespace hvdlite::transport::nccl {

class ReadyEvents : public std::enable_shared_from_this<ReadyEvents> {
 public:
  explicit ReadyEvents(std::shared_ptr<const GpuLibraries> libraries) : libraries_(std::move(libraries)) {}
  ~ReadyEvents();  // destroys the spare events
  ReadyEvents(const ReadyEvents&) = delete;
  ReadyEvents& operator=(const ReadyEvents&) = delete;

  // Thread-safe. Records an event of GPU `device` on `stream` (null: that
  // GPU's legacy default stream); the event comes back here when the last
  // reference goes. Leaves the calling thread's current device as it was.
  DeviceEvent record(int device, cudaStream_t stream);

 private:
  cudaEvent_t take(int device);
  void give(int device, cudaEvent_t event);
  const CudaApi& cuda() const { return libraries_->cuda(); }

  std::shared_ptr<const GpuLibraries> libraries_;
  std::mutex mutex_;
  std::map<int, std::vector<cudaEvent_t>> spare_;  // by device
};

}  // namespace hvdlite::transport::nccl
