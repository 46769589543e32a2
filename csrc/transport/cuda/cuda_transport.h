// The DeviceTransport of CUDA tensors (created through createDeviceTransport()):
// NCCL communicators, or host-staged ones (HVDLITE_GPU_OPERATIONS=host), and
// what they share: the libraries (loaded once, on first need), one stream per
// GPU, the event pool, and fusion-buffer memory.
#pragma once

#include <memory>

#include "transport/device_communicator.h"

namespace hvdlite::transport::cuda {

std::unique_ptr<DeviceTransport> makeTransport(const DeviceTransportOptions& options);

}  // namespace hvdlite::transport::cuda
