#include "api/maintenance.h"

#include "core/config.h"
#include "transport/device_communicator.h"
#include "transport/shm/segment.h"
#include "transport/transport.h"

namespace hvdlite::api {

std::vector<std::string> builtTransports() { return transport::builtTransports(); }

bool mpiThreadsSupported() { return transport::mpiThreadsSupported(); }

namespace {

// The GPU library settings of `env` (the rest may not parse before init).
transport::DeviceTransportOptions gpuOptions(const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> gpu_only;
  for (const auto& [key, value] : env) {
    for (const char* name : {"NCCL_LIBRARY", "CUDART_LIBRARY", "GPU_LIBRARY_PATH", "GPU_OPERATIONS", "GPU_ALLREDUCE",
                             "NCCL_TIMEOUT_SECONDS", "BATCHED_COPIES"}) {
      if (key.find(name) != std::string::npos) gpu_only[key] = value;
    }
  }
  auto config = core::Config::fromEnvironment(gpu_only);
  return {config.nccl_library, config.cudart_library, config.gpu_library_path, config.nccl_timeout_s,
          config.gpu_operations, config.batched_copies};
}

}  // namespace

int ncclVersion(const std::map<std::string, std::string>& env) { return transport::ncclVersion(gpuOptions(env)); }

transport::GpuLibraryReport gpuLibraries(const std::map<std::string, std::string>& env) {
  return transport::gpuLibraryReport(gpuOptions(env));
}

transport::mpi::MpiLibraryReport mpiLibraries(const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> mpi_only;
  for (const auto& [key, value] : env) {
    if (key.find("MPI_LIBRARY") != std::string::npos) mpi_only[key] = value;
  }
  auto config = core::Config::fromEnvironment(mpi_only);
  return transport::mpi::mpiLibraryReport(transport::mpi::mpiSearch(config.mpi_library, config.mpi_library_path));
}

int removeJobSegments(const std::string& job_id, const std::string& keep) {
  return transport::shm::removeStaleSegments(job_id, keep);
}

}  // namespace hvdlite::api
