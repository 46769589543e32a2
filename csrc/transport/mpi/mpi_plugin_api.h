// What crosses between libhvdlite and an MPI plugin (libhvdlite_mpi_openmpi.so,
// libhvdlite_mpi_mpich.so; Note [MPI at run time] in mpi_loader.h). It names
// no MPI type, so that libhvdlite compiles without any mpi.h.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace hvdlite::transport::mpi {

// Raised whenever this table or a type it passes (TransportOptions,
// Transport) changes: a plugin of another build is refused, not called.
constexpr int kMpiPluginAbiVersion = 1;

// The name of the plugin's one exported symbol: `const MpiPluginApi* ()`.
constexpr const char* kMpiPluginEntry = "hvdlite_mpi_plugin";

struct MpiPluginApi {
  int abi_version;     // kMpiPluginAbiVersion of the plugin's build
  const char* family;  // "openmpi" or "mpich": whose mpi.h it was compiled against
  // MpiTransport's constructor (mpi_transport.h): initialises MPI on first
  // use; throws TransportError or InvalidArgument.
  std::unique_ptr<Transport> (*create_transport)(const TransportOptions& options);
  // True when MPI is initialised (by anyone) with MPI_THREAD_MULTIPLE.
  bool (*thread_multiple_provided)();
};

// The type of kMpiPluginEntry (defined by each plugin in mpi_plugin.cc).
using MpiPluginEntry = const MpiPluginApi* (*)();

}  // namespace hvdlite::transport::mpi
