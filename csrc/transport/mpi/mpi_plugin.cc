// The one entry point of an MPI plugin (Note [MPI at run time] in
// mpi_loader.h): compiled into libhvdlite_mpi_<family>.so with the transport,
// against that family's mpi.h.
#include "transport/mpi/mpi_library.h"
#include "transport/mpi/mpi_plugin_api.h"
#include "transport/mpi/mpi_transport.h"

#ifndef HVDLITE_MPI_FAMILY
#error "cmake/mpi.cmake defines HVDLITE_MPI_FAMILY (openmpi or mpich) for each plugin"
#endif

namespace hvdlite::transport::mpi {
namespace {

std::unique_ptr<Transport> createTransport(const TransportOptions& options) {
  return std::make_unique<MpiTransport>(options);
}

const MpiPluginApi kApi = {kMpiPluginAbiVersion, HVDLITE_MPI_FAMILY, &createTransport,
                           &threadMultipleProvided};

}  // namespace
}  // namespace hvdlite::transport::mpi

extern "C" __attribute__((visibility("default"))) const hvdlite::transport::mpi::MpiPluginApi*
hvdlite_mpi_plugin() {
  return &hvdlite::transport::mpi::kApi;
}
