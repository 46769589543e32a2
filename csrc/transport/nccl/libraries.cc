#include "transport/nccl/libraries.h"

#include "common/errors.h"

namespace hvdlite::transport::nccl {
namespace {

constexpr const char* kNcclFile = "libnccl.so.2";
constexpr const char* kCudartFile = "libcudart.so.12";

std::vector<std::string> candidates(const std::string& exact, const std::vector<std::string>& files,
                                    const std::vector<std::string>& directories) {
  // An explicit path is a promise from the user: never silently load another.
  if (!exact.empty()) return {exact};
  std::vector<std::string> out;
  for (const auto& file : files) out.push_back(alreadyLoaded(file));
  for (const auto& dir : directories) {
    if (dir.empty()) continue;
    for (const auto& file : files) out.push_back(dir + "/" + file);
  }
  for (const auto& file : files) out.push_back(file);
  return out;
}

template <typename Fn>
void resolve(const DynamicLibrary& lib, const char* name, Fn*& out, std::string& missing) {
  out = reinterpret_cast<Fn*>(lib.symbol(name));
  if (!out) missing += std::string(missing.empty() ? "" : ", ") + name;
}

std::string tried(const DynamicLibrary& lib) {
  return lib.failures().empty() ? std::string() : "; tried:\n" + lib.failures();
}

}  // namespace

std::vector<std::string> ncclCandidates(const LibrarySearch& search) {
  return candidates(search.nccl_library, {kNcclFile}, search.directories);
}

std::vector<std::string> cudartCandidates(const LibrarySearch& search) {
  return candidates(search.cudart_library, {kCudartFile, "libcudart.so"}, search.directories);
}

int ncclVersion(const LibrarySearch& search) {
  DynamicLibrary lib(ncclCandidates(search));
  using GetVersion = ncclResult_t(int*);
  auto* get_version = reinterpret_cast<GetVersion*>(lib.symbol("ncclGetVersion"));
  int version = 0;
  if (!get_version || get_version(&version) != ncclSuccess) return 0;
  return version;
}

std::shared_ptr<const GpuLibraries> GpuLibraries::load(const LibrarySearch& search) {
  auto nccl = std::make_unique<DynamicLibrary>(ncclCandidates(search));
  if (!nccl->loaded()) {
    throw TransportError(
        "NCCL (libnccl.so.2) could not be loaded" + tried(*nccl) +
        "Install it with `pip install nvidia-nccl-cu12` (a CUDA build of PyTorch brings it too), "
        "or set HVDLITE_NCCL_LIBRARY to the full path of libnccl.so.2");
  }
  auto cudart = std::make_unique<DynamicLibrary>(cudartCandidates(search));
  if (!cudart->loaded()) {
    throw TransportError(
        "the CUDA runtime (libcudart.so.12) could not be loaded" + tried(*cudart) +
        "Install it with `pip install nvidia-cuda-runtime-cu12` (a CUDA build of PyTorch brings "
        "it too), or set HVDLITE_CUDART_LIBRARY to the full path of libcudart.so.12");
  }
  auto libraries = std::make_shared<GpuLibraries>(std::move(cudart), std::move(nccl));
  // Found now rather than on the background thread, where it would stop the job.
  const CudaApi& cuda = libraries->cuda();
  int devices = 0;
  cudaError_t result = cuda.GetDeviceCount(&devices);
  if (result != cudaSuccess || devices == 0) {
    std::string why = result != cudaSuccess ? "CUDA error " + std::to_string(result) + " (" +
                                                  cuda.GetErrorString(result) + ")"
                                            : std::string("no device");
    throw TransportError("the CUDA runtime " + libraries->cudart_lib_->path() +
                         " finds no usable GPU: " + why +
                         ". Check that the NVIDIA driver is installed and new enough for this runtime, "
                         "and that CUDA_VISIBLE_DEVICES shows a GPU to this process");
  }
  return libraries;
}

GpuLibraries::GpuLibraries(std::unique_ptr<DynamicLibrary> cudart, std::unique_ptr<DynamicLibrary> nccl)
    : cudart_lib_(std::move(cudart)), nccl_lib_(std::move(nccl)) {
  std::string missing;
  const DynamicLibrary& c = *cudart_lib_;
  resolve(c, "cudaGetDeviceCount", cuda_.GetDeviceCount, missing);
  resolve(c, "cudaGetDevice", cuda_.GetDevice, missing);
  resolve(c, "cudaSetDevice", cuda_.SetDevice, missing);
  resolve(c, "cudaStreamCreateWithFlags", cuda_.StreamCreateWithFlags, missing);
  resolve(c, "cudaStreamDestroy", cuda_.StreamDestroy, missing);
  resolve(c, "cudaStreamSynchronize", cuda_.StreamSynchronize, missing);
  resolve(c, "cudaStreamWaitEvent", cuda_.StreamWaitEvent, missing);
  resolve(c, "cudaEventCreateWithFlags", cuda_.EventCreateWithFlags, missing);
  resolve(c, "cudaEventDestroy", cuda_.EventDestroy, missing);
  resolve(c, "cudaEventRecord", cuda_.EventRecord, missing);
  resolve(c, "cudaEventQuery", cuda_.EventQuery, missing);
  resolve(c, "cudaMalloc", cuda_.Malloc, missing);
  resolve(c, "cudaFree", cuda_.Free, missing);
  resolve(c, "cudaMallocAsync", cuda_.MallocAsync, missing);
  resolve(c, "cudaFreeAsync", cuda_.FreeAsync, missing);
  resolve(c, "cudaMallocHost", cuda_.MallocHost, missing);
  resolve(c, "cudaFreeHost", cuda_.FreeHost, missing);
  resolve(c, "cudaMemcpyAsync", cuda_.MemcpyAsync, missing);
  resolve(c, "cudaGetErrorString", cuda_.GetErrorString, missing);
  if (!missing.empty()) {
    throw TransportError("the CUDA runtime " + c.path() + " lacks " + missing +
                         "; hvdlite needs CUDA 12 (pip install nvidia-cuda-runtime-cu12)");
  }
  const DynamicLibrary& n = *nccl_lib_;
  resolve(n, "ncclGetVersion", nccl_.GetVersion, missing);
  resolve(n, "ncclGetUniqueId", nccl_.GetUniqueId, missing);
  resolve(n, "ncclCommInitRank", nccl_.CommInitRank, missing);
  resolve(n, "ncclCommDestroy", nccl_.CommDestroy, missing);
  resolve(n, "ncclCommAbort", nccl_.CommAbort, missing);
  resolve(n, "ncclCommGetAsyncError", nccl_.CommGetAsyncError, missing);
  // Optional (NCCL 2.14): without it, communicators are created blocking.
  nccl_.CommInitRankConfig =
      reinterpret_cast<decltype(nccl_.CommInitRankConfig)>(n.symbol("ncclCommInitRankConfig"));
  resolve(n, "ncclGetErrorString", nccl_.GetErrorString, missing);
  resolve(n, "ncclAllReduce", nccl_.AllReduce, missing);
  resolve(n, "ncclBroadcast", nccl_.Broadcast, missing);
  resolve(n, "ncclReduce", nccl_.Reduce, missing);
  resolve(n, "ncclAllGather", nccl_.AllGather, missing);
  resolve(n, "ncclReduceScatter", nccl_.ReduceScatter, missing);
  resolve(n, "ncclSend", nccl_.Send, missing);
  resolve(n, "ncclRecv", nccl_.Recv, missing);
  resolve(n, "ncclGroupStart", nccl_.GroupStart, missing);
  resolve(n, "ncclGroupEnd", nccl_.GroupEnd, missing);
  resolve(n, "ncclRedOpCreatePreMulSum", nccl_.RedOpCreatePreMulSum, missing);
  resolve(n, "ncclRedOpDestroy", nccl_.RedOpDestroy, missing);
  if (nccl_.GetVersion) nccl_.GetVersion(&nccl_version_);
  if (!missing.empty() || nccl_version_ < kMinimumNcclVersion) {
    throw TransportError("NCCL at " + n.path() + " (version " + std::to_string(nccl_version_) +
                         ") is too old or incomplete" + (missing.empty() ? "" : " (lacks " + missing + ")") +
                         "; hvdlite needs NCCL 2.11 or newer: pip install -U nvidia-nccl-cu12, or "
                         "set HVDLITE_NCCL_LIBRARY to a newer libnccl.so.2");
  }
}

void checkCuda(const CudaApi& cuda, cudaError_t result, const char* what) {
  if (result == cudaSuccess) return;
  throw TransportError(std::string(what) + " failed: CUDA error " + std::to_string(result) + " (" +
                       cuda.GetErrorString(result) + ")");
}

void checkNccl(const NcclApi& nccl, ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return;
  throw TransportError(std::string(what) + " failed: NCCL error " + std::to_string(result) + " (" +
                       nccl.GetErrorString(result) +
                       "); set NCCL_DEBUG=WARN for NCCL's own explanation");
}

}  // namespace hvdlite::transport::nccl
