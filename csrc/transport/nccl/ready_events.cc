#include "transport/nccl/ready_events.h"

#include <cstdint>
#include <optional>
#include <string>

namespace hvdlite::transport::nccl {
namespace {

// Makes `device` the calling thread's current device for one call, and sets
// the previous one back: CUDA ties events and the default streams to the
// current device, and the framework's thread must not see it change.
class OnDevice {
 public:
  OnDevice(const CudaApi& cuda, int device) : cuda_(cuda) {
    checkCuda(cuda_, cuda_.GetDevice(&previous_), "cudaGetDevice");
    if (previous_ == device) return;
    checkCuda(cuda_, cuda_.SetDevice(device), ("cudaSetDevice(" + std::to_string(device) + ")").c_str());
    switched_ = true;
  }
  ~OnDevice() {
    if (switched_) cuda_.SetDevice(previous_);
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  const CudaApi& cuda_;
  int previous_ = 0;
  bool switched_ = false;
};

// Null, cudaStreamLegacy (1) and cudaStreamPerThread (2) name the current
// device's default stream.
bool isDefaultStream(cudaStream_t stream) { return reinterpret_cast<uintptr_t>(stream) <= 2; }

}  // namespace

ReadyEvents::~ReadyEvents() {
  for (auto& [device, events] : spare_) {
    for (auto* event : events) cuda().EventDestroy(event);
  }
}

cudaEvent_t ReadyEvents::take(int device) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& spare = spare_[device];
    if (!spare.empty()) {
      cudaEvent_t event = spare.back();
      spare.pop_back();
      return event;
    }
  }
  // Rare (the pool grows to the number of entries in flight): an event
  // belongs to the device current at its creation.
  OnDevice on(cuda(), device);
  cudaEvent_t event = nullptr;
  checkCuda(cuda(), cuda().EventCreateWithFlags(&event, kCudaEventDisableTiming),
            "creating a ready event (cudaEventCreateWithFlags)");
  return event;
}

void ReadyEvents::give(int device, cudaEvent_t event) {
  // Safe to record again at once: a stream that waits on it waits for the
  // record it saw when the wait was queued (cudaStreamWaitEvent).
  std::lock_guard<std::mutex> lock(mutex_);
  spare_[device].push_back(event);
}

DeviceEvent ReadyEvents::record(int device, cudaStream_t stream) {
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
    checkCuda(cuda(), result,
              ("recording the ready event on the framework's stream of GPU " + std::to_string(device)).c_str());
  }
  return DeviceEvent(event, [self = shared_from_this(), device](void* e) {
    self->give(device, static_cast<cudaEvent_t>(e));
  });
}

}  // namespace hvdlite::transport::nccl
