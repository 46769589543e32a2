// The one place that maps a transport name to its implementation. A new
// backend adds one line here (and its folder and CMake condition).
// HVDLITE_CONTROLLER pairs two of them in a SplitTransport.
#include <memory>

#include "common/errors.h"
#include "transport/cuda/cuda_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/mpi/mpi_loader.h"
#include "transport/transport.h"

namespace hvdlite::transport {
namespace {

// Two transports in one: data over one, negotiation over the other
// (HVDLITE_CONTROLLER=mpi with the built-in transport for data, or the
// reverse), as Horovod lets its controller and its operations differ.
class SplitTransport : public Transport {
 public:
  // control_aborts_last: abort() ends with control's half (it is MPI's).
  SplitTransport(std::unique_ptr<Transport> data, std::unique_ptr<Transport> control,
                 bool control_aborts_last)
      : data_(std::move(data)), control_(std::move(control)), control_aborts_last_(control_aborts_last) {}

  std::unique_ptr<Communicator> communicator(const std::vector<int>& global_ranks) override {
    return data_->communicator(global_ranks);
  }
  std::unique_ptr<Communicator> controlCommunicator(const std::vector<int>& global_ranks) override {
    return control_->communicator(global_ranks);
  }
  // The built-in transport's half first: its peers then fail fast with their
  // own message before an MPI_Abort may end the job.
  void abort() override {
    Transport& first = control_aborts_last_ ? *data_ : *control_;
    Transport& last = control_aborts_last_ ? *control_ : *data_;
    first.abort();
    last.abort();
  }
  const std::vector<std::string>& hostnames() const override { return data_->hostnames(); }
  // Both halves may share the link to a peer: their bytes add up.
  uint64_t bytesSentTo(int global_rank) const override {
    return data_->bytesSentTo(global_rank) + control_->bytesSentTo(global_rank);
  }

 private:
  std::unique_ptr<Transport> data_;
  std::unique_ptr<Transport> control_;
  bool control_aborts_last_;
};

// libmpi and the plugin of its family, opened now (Note [MPI at run time]).
std::unique_ptr<Transport> createMpi(const TransportOptions& options) {
  if (mpi::builtMpiPlugins().empty()) {
    throw InvalidArgument(
        "the MPI transport was selected (HVDLITE_CPU_OPERATIONS=mpi or HVDLITE_CONTROLLER=mpi, "
        "or their HOROVOD_ names), but this hvdlite was built without any MPI plugin (no MPI "
        "headers were found when it was built); rebuild it with an MPI's headers at hand "
        "(docs/getting-started.md, \"MPI at run time\"), or unset those variables to use the built-in "
        "transport");
  }
  auto search = mpi::mpiSearch(options.mpi_library, options.mpi_library_path);
  return mpi::loadMpi(search).api->create_transport(options);
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
  if (!mpi::builtMpiPlugins().empty()) names.push_back("mpi");
  return names;
}

bool mpiThreadsSupported() {
  const mpi::LoadedMpi* mpi = mpi::loadedMpi();  // never loads MPI just to answer
  return mpi && mpi->api->thread_multiple_provided();
}

// CUDA tensors: NCCL or host staging; the CUDA libraries are loaded at run time (cuda/cuda_runtime.h).
std::unique_ptr<DeviceTransport> createDeviceTransport(const DeviceTransportOptions& options) {
  return cuda::makeTransport(options);
}

}  // namespace hvdlite::transport
