#include "api/maintenance.h"

#include "core/config.h"
#include "transport/device_communicator.h"
#include "transport/shm/segment.h"
#include "transport/transport.h"

namespace hvdlite::api {

std::vector<std::string> builtTransports() { return transport::builtTransports(); }

bool mpiThreadsSupported() { return transport::mpiThreadsSupported(); }

int ncclVersion(const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> gpu_only;  // the rest may not parse before init
  for (const auto& [key, value] : env) {
    if (key.find("NCCL_LIBRARY") != std::string::npos || key.find("CUDART_LIBRARY") != std::string::npos ||
        key.find("GPU_LIBRARY_PATH") != std::string::npos) {
      gpu_only[key] = value;
    }
  }
  auto config = core::Config::fromEnvironment(gpu_only);
  return transport::ncclVersion({config.nccl_library, config.cudart_library, config.gpu_library_path});
}

int removeJobSegments(const std::string& job_id, const std::string& keep) {
  return transport::shm::removeStaleSegments(job_id, keep);
}

}  // namespace hvdlite::api
