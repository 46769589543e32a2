// The one place that maps a transport name to its implementation. A new
// backend adds one line here (and its folder and CMake condition).
#include "common/errors.h"
#include "transport/cuda/cuda_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/split_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"
#ifdef HVDLITE_WITH_MPI
#include "transport/mpi/mpi_library.h"
#include "transport/mpi/mpi_transport.h"
#endif

namespace hvdlite::transport {
namespace {

std::unique_ptr<Transport> createMpi(const TransportOptions& options) {
#ifdef HVDLITE_WITH_MPI
  return std::make_unique<mpi::MpiTransport>(options);
#else
  throw InvalidArgument(
      "the MPI transport was selected (HVDLITE_CPU_OPERATIONS=mpi or HVDLITE_CONTROLLER=mpi, "
      "or their HOROVOD_ names), but this hvdlite was built without MPI; rebuild it with an MPI "
      "installed (README: \"Building with MPI\"), or unset those variables to use the built-in "
      "transport");
#endif
}

bool isMpi(const std::string& name) { return name == "mpi"; }

}  // namespace

std::unique_ptr<Transport> createTransport(const std::string& name, const TransportOptions& options,
                                           Store& store) {
  if (name == "tcp") return std::make_unique<tcp::TcpTransport>(options, store);
  // Shared memory between ranks of one host, TCP for everything else.
  if (name == "shm" || name == "auto") return std::make_unique<shm::ShmTransport>(options, store);
  if (isMpi(name)) return createMpi(options);
  throw InvalidArgument("unknown transport '" + name +
                        "' (HVDLITE_CPU_OPERATIONS); known transports: tcp, auto (the default, "
                        "alias gloo: shared memory within a host and tcp across hosts), shm "
                        "(same as auto), mpi (when built with MPI)");
}

std::unique_ptr<Transport> createTransport(const std::string& name, const std::string& controller,
                                           const TransportOptions& options, Store& store) {
  if (controller != "auto" && controller != "mpi" && controller != "tcp") {
    throw InvalidArgument("unknown controller '" + controller +
                          "' (HVDLITE_CONTROLLER); known controllers: auto (negotiate over the "
                          "data's transport), mpi, tcp (alias gloo: the built-in transport)");
  }
  if (controller == "auto" || isMpi(controller) == isMpi(name)) {
    return createTransport(name, options, store);
  }
  // MPI for one role and the built-in transport for the other.
  auto control = isMpi(controller) ? createMpi(options) : createTransport("tcp", options, store);
  auto data = createTransport(name, options, store);
  return std::make_unique<SplitTransport>(std::move(data), std::move(control), isMpi(controller));
}

bool needsStore(const std::string& name, const std::string& controller) {
  return !(isMpi(name) && (controller == "auto" || isMpi(controller)));
}

std::vector<std::string> builtTransports() {
  std::vector<std::string> names = {"tcp", "shm"};
#ifdef HVDLITE_WITH_MPI
  names.push_back("mpi");
#endif
  return names;
}

bool mpiThreadsSupported() {
#ifdef HVDLITE_WITH_MPI
  return mpi::threadMultipleProvided();
#else
  return false;
#endif
}

// CUDA tensors: NCCL or host staging; the CUDA libraries are loaded at run time (cuda/cuda_runtime.h).
std::unique_ptr<DeviceTransport> createDeviceTransport(const DeviceTransportOptions& options) {
  return cuda::makeTransport(options);
}

}  // namespace hvdlite::transport
