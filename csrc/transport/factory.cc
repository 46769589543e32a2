// The one place that maps a transport name to its implementation. A new
// backend adds one line here (and its folder and CMake condition).
#include "common/errors.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace hvdlite::transport {

std::unique_ptr<Transport> createTransport(const std::string& name, const TransportOptions& options,
                                           Store& store) {
  if (name == "tcp") return std::make_unique<tcp::TcpTransport>(options, store);
  throw InvalidArgument("unknown transport '" + name +
                        "' (HVDLITE_CPU_OPERATIONS); known transports: tcp (alias gloo)");
}

}  // namespace hvdlite::transport
