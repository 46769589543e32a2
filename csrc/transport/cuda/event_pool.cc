#include "transport/cuda/event_pool.h"

#include <optional>
#include <string>

namespace hvdlite::transport::cuda {

EventPool::~EventPool() {
  for (auto& [device, events] : spare_) {
    for (auto* event : events) cuda().EventDestroy(event);
  }
}

cudaEvent_t EventPool::take(int device) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& spare = spare_[device];
    if (!spare.empty()) {
      cudaEvent_t event = spare.back();
      spare.pop_back();
      return event;
    }
  }
  // Rare (the pool grows to the number of events lent out at once): an
  // event belongs to the device current at its creation.
  OnDevice on(cuda(), device);
  cudaEvent_t event = nullptr;
  checkCuda(cuda(), cuda().EventCreateWithFlags(&event, kCudaEventDisableTiming), "cudaEventCreateWithFlags");
  return event;
}

void EventPool::give(int device, cudaEvent_t event) {
  // Safe to record again at once: a stream that waits on it waits for the
  // record it saw when the wait was queued (cudaStreamWaitEvent).
  std::lock_guard<std::mutex> lock(mutex_);
  spare_[device].push_back(event);
}

DeviceEvent EventPool::record(int device, cudaStream_t stream) {
  cudaEvent_t event = take(device);
  cudaError_t result;
  {
    // Any current device will do for a stream of its own.
    std::optional<OnDevice> on;
    if (isDefaultStream(stream)) on.emplace(cuda(), device);
    result = cuda().EventRecord(event, stream);
  }
  if (result != cudaSuccess) {
    give(device, event);
    checkCuda(cuda(), result, "recording an event on a stream of GPU " + std::to_string(device));
  }
  return DeviceEvent(event, [self = shared_from_this(), device](void* e) {
    self->give(device, static_cast<cudaEvent_t>(e));
  });
}

}  // namespace hvdlite::transport::cuda
