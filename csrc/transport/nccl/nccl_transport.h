// The NCCL DeviceTransport (CUDA tensors); created through createDeviceTransport().
#pragma once

#include <memory>

#include "transport/device_communicator.h"

namespace hvdlite::transport::nccl {

std::unique_ptr<DeviceTransport> makeTransport(const DeviceTransportOptions& options);

}  // namespace hvdlite::transport::nccl
