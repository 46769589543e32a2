// The one place that maps a transport name to its implementation. A new
// backend adds one line here (and its folder and CMake condition).
#include "common/errors.h"
#include "transport/nccl/nccl_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace hvdlite::transport {

std::unique_ptr<Transport> createTransport(const std::string& name, const TransportOptions& options,
                                           Store& store) {
  if (name == "tcp") return std::make_unique<tcp::TcpTransport>(options, store);
  // Shared memory between ranks of one host, TCP for everything else.
  if (name == "shm" || name == "auto") return std::make_unique<shm::ShmTransport>(options, store);
  throw InvalidArgument("unknown transport '" + name +
                        "' (HVDLITE_CPU_OPERATIONS); known transports: tcp, auto (the default, "
                        "alias gloo: shared memory within a host and tcp across hosts), shm "
                        "(same as auto)");
}

// CUDA tensors: NCCL, loaded at run time (nccl/libraries.h).
std::unique_ptr<DeviceTransport> createDeviceTransport(const DeviceTransportOptions& options) {
  return nccl::makeTransport(options);
}

}  // namespace hvdlite::transport
