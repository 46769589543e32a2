// Finds and loads libnccl.so.2 at run time (Note [GPU library search] in
// transport/cuda/cuda_runtime.h says where it looks). NCCL for CUDA 12 and
// for CUDA 13 share this file name; the framework's copy, when it loaded
// one, is used.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/cuda/cuda_runtime.h"
#include "transport/nccl/nccl_api.h"

namespace hvdlite::transport::nccl {

using cuda::LibrarySearch;

std::vector<std::string> ncclCandidates(const LibrarySearch& search);

// NCCL's version (ncclGetVersion, e.g. 21903), or 0 when no libnccl loads or
// it lacks ncclGetVersion. Needs no GPU and no CUDA runtime.
int ncclVersion(const LibrarySearch& search);

// NCCL, loaded, with every entry point hvdlite calls resolved.
class NcclLibrary {
 public:
  // Throws TransportError saying what is missing, where it looked and what
  // to install or set.
  static std::shared_ptr<const NcclLibrary> load(const LibrarySearch& search);

  const NcclApi& api() const { return api_; }
  int version() const { return version_; }
  std::string location() const { return library_->location(); }

  explicit NcclLibrary(std::unique_ptr<cuda::DynamicLibrary> library);

 private:
  std::unique_ptr<cuda::DynamicLibrary> library_;
  NcclApi api_{};
  int version_ = 0;
};

// Throws TransportError with `what` and NCCL's text when a call failed.
void checkNccl(const NcclApi& nccl, ncclResult_t result, const std::string& what);

}  // namespace hvdlite::transport::nccl
