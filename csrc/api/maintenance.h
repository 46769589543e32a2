// What the Python layers and the launcher ask of libhvdlite without a running
// Runtime: what this build and this machine offer, and the clean-up of a job's
// leftovers. Thread-safe; none of these needs init().
#pragma once

#include <map>
#include <string>
#include <vector>

#include "transport/device_communicator.h"
#include "transport/mpi/mpi_loader.h"

namespace hvdlite::api {

// The transports this build has, e.g. {"tcp", "shm", "mpi"}.
std::vector<std::string> builtTransports();

// True when MPI is initialised in this process with MPI_THREAD_MULTIPLE.
bool mpiThreadsSupported();

// NCCL's version if libnccl.so.2 loads where the core would look for it with
// these variables (HVDLITE_NCCL_LIBRARY, HVDLITE_CUDART_LIBRARY,
// HVDLITE_GPU_LIBRARY_PATH or their HOROVOD_ names; others are ignored), else 0.
int ncclVersion(const std::map<std::string, std::string>& env);

// The CUDA libraries the core would use with these variables (the GPU ones
// above, and HVDLITE_GPU_OPERATIONS): loads them in a fresh transport, so
// the answer is this machine's even before init(). Never throws: `error`
// says why a needed library did not load.
transport::GpuLibraryReport gpuLibraries(const std::map<std::string, std::string>& env);

// The MPI the core would use with these variables (HVDLITE_MPI_LIBRARY,
// HVDLITE_MPI_LIBRARY_PATH; others are ignored), or the one it uses: loads
// it (Note [MPI at run time]). Never throws: `error` says why not.
transport::mpi::MpiLibraryReport mpiLibraries(const std::map<std::string, std::string>& env);

// Removes a job's leftover shared-memory segments, once it ended or once a
// round replaced the one they were made for; `keep`: the new round's tag,
// "-r<N>-", or "" for all (Note [Segment lifetime] in transport/shm/segment.h).
// Returns how many it removed.
int removeJobSegments(const std::string& job_id, const std::string& keep);

}  // namespace hvdlite::api
