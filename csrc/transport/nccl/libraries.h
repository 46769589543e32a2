// Finds and loads libnccl.so.2 and the CUDA runtime at run time.
//
// Search order, for each library (Note [GPU library search]):
//   1. the file named by HVDLITE_NCCL_LIBRARY / HVDLITE_CUDART_LIBRARY, and only that;
//   2. a copy already loaded into this process (e.g. by PyTorch), so there is one;
//   3. each directory of HVDLITE_GPU_LIBRARY_PATH, in order: hvdlite's Python
//      layer appends the nvidia-nccl-cu12 / nvidia-cuda-runtime-cu12 wheels'
//      nvidia/*/lib, then torch/lib (hvdlite/common/gpu_libraries.py);
//   4. the system's default search path (LD_LIBRARY_PATH, ldconfig).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/nccl/api.h"
#include "transport/nccl/dynamic_library.h"

namespace hvdlite::transport::nccl {

struct LibrarySearch {
  std::string nccl_library;    // HVDLITE_NCCL_LIBRARY; "" = search
  std::string cudart_library;  // HVDLITE_CUDART_LIBRARY; "" = search
  std::vector<std::string> directories;  // HVDLITE_GPU_LIBRARY_PATH
};

std::vector<std::string> ncclCandidates(const LibrarySearch& search);
std::vector<std::string> cudartCandidates(const LibrarySearch& search);

// NCCL's version (ncclGetVersion, e.g. 21903), or 0 when no libnccl loads or
// it lacks ncclGetVersion. Needs no GPU and no CUDA runtime.
int ncclVersion(const LibrarySearch& search);

// Both libraries, loaded, with every entry point hvdlite calls resolved.
class GpuLibraries {
 public:
  // Throws TransportError saying what is missing, where it looked and what to
  // install or set.
  static std::shared_ptr<const GpuLibraries> load(const LibrarySearch& search);

  const CudaApi& cuda() const { return cuda_; }
  const NcclApi& nccl() const { return nccl_; }
  int ncclVersion() const { return nccl_version_; }

  GpuLibraries(std::unique_ptr<DynamicLibrary> cudart, std::unique_ptr<DynamicLibrary> nccl);

 private:
  std::unique_ptr<DynamicLibrary> cudart_lib_;
  std::unique_ptr<DynamicLibrary> nccl_lib_;
  CudaApi cuda_{};
  NcclApi nccl_{};
  int nccl_version_ = 0;
};

// Throws TransportError with `what` and the CUDA/NCCL error's text when a call failed.
void checkCuda(const CudaApi& cuda, cudaError_t result, const char* what);
void checkNccl(const NcclApi& nccl, ncclResult_t result, const char* what);

}  // namespace hvdlite::transport::nccl
