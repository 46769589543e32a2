#include "transport/nccl/nccl_library.h"

#include "common/errors.h"

namespace hvdlite::transport::nccl {
namespace {

constexpr const char* kNcclFile = "libnccl.so.2";

template <typename Fn>
void resolve(const cuda::DynamicLibrary& lib, const char* name, Fn*& out, std::string& missing) {
  out = reinterpret_cast<Fn*>(lib.symbol(name));
  if (!out) missing += std::string(missing.empty() ? "" : ", ") + name;
}

}  // namespace

std::vector<std::string> ncclCandidates(const LibrarySearch& search) {
  return cuda::libraryCandidates(search.nccl_library, {kNcclFile}, search.directories);
}

int ncclVersion(const LibrarySearch& search) {
  cuda::DynamicLibrary lib(ncclCandidates(search));
  using GetVersion = ncclResult_t(int*);
  auto* get_version = reinterpret_cast<GetVersion*>(lib.symbol("ncclGetVersion"));
  int version = 0;
  if (!get_version || get_version(&version) != ncclSuccess) return 0;
  return version;
}

std::shared_ptr<const NcclLibrary> NcclLibrary::load(const LibrarySearch& search) {
  auto library = std::make_unique<cuda::DynamicLibrary>(ncclCandidates(search));
  if (!library->loaded()) {
    throw TransportError("NCCL (libnccl.so.2) could not be loaded" +
                         (library->failures().empty() ? std::string(". ") : "; tried:\n" + library->failures()) +
                         "Install it with `pip install nvidia-nccl-cu12` (CUDA 12) or `pip install "
                         "nvidia-nccl-cu13` (CUDA 13) to match your CUDA runtime (a CUDA build of PyTorch brings "
                         "it), set HVDLITE_NCCL_LIBRARY to the full path of libnccl.so.2, or run CUDA tensors "
                         "over the CPU transport with HVDLITE_GPU_OPERATIONS=host");
  }
  return std::make_shared<NcclLibrary>(std::move(library));
}

NcclLibrary::NcclLibrary(std::unique_ptr<cuda::DynamicLibrary> library) : library_(std::move(library)) {
  std::string missing;
  const cuda::DynamicLibrary& n = *library_;
  resolve(n, "ncclGetVersion", api_.GetVersion, missing);
  resolve(n, "ncclGetUniqueId", api_.GetUniqueId, missing);
  resolve(n, "ncclCommInitRank", api_.CommInitRank, missing);
  resolve(n, "ncclCommDestroy", api_.CommDestroy, missing);
  resolve(n, "ncclCommAbort", api_.CommAbort, missing);
  resolve(n, "ncclCommGetAsyncError", api_.CommGetAsyncError, missing);
  // Optional (NCCL 2.14): without them, communicators are created blocking
  // and destroyed without a finalize.
  api_.CommInitRankConfig = reinterpret_cast<decltype(api_.CommInitRankConfig)>(n.symbol("ncclCommInitRankConfig"));
  api_.CommFinalize = reinterpret_cast<decltype(api_.CommFinalize)>(n.symbol("ncclCommFinalize"));
  resolve(n, "ncclGetErrorString", api_.GetErrorString, missing);
  resolve(n, "ncclAllReduce", api_.AllReduce, missing);
  resolve(n, "ncclBroadcast", api_.Broadcast, missing);
  resolve(n, "ncclReduce", api_.Reduce, missing);
  resolve(n, "ncclAllGather", api_.AllGather, missing);
  resolve(n, "ncclReduceScatter", api_.ReduceScatter, missing);
  resolve(n, "ncclSend", api_.Send, missing);
  resolve(n, "ncclRecv", api_.Recv, missing);
  resolve(n, "ncclGroupStart", api_.GroupStart, missing);
  resolve(n, "ncclGroupEnd", api_.GroupEnd, missing);
  resolve(n, "ncclRedOpCreatePreMulSum", api_.RedOpCreatePreMulSum, missing);
  resolve(n, "ncclRedOpDestroy", api_.RedOpDestroy, missing);
  if (api_.GetVersion) api_.GetVersion(&version_);
  if (!missing.empty() || version_ < kMinimumNcclVersion) {
    throw TransportError("NCCL at " + n.location() + " (version " + std::to_string(version_) +
                         ") is too old or incomplete" + (missing.empty() ? "" : " (lacks " + missing + ")") +
                         "; hvdlite needs NCCL 2.11 or newer: pip install -U nvidia-nccl-cu12 (or -cu13), or "
                         "set HVDLITE_NCCL_LIBRARY to a newer libnccl.so.2");
  }
}

void checkNccl(const NcclApi& nccl, ncclResult_t result, const std::string& what) {
  if (result == ncclSuccess) return;
  throw TransportError(what + " failed: NCCL error " + std::to_string(result) + " (" + nccl.GetErrorString(result) +
                       "); set NCCL_DEBUG=WARN for NCCL's own explanation");
}

}  // namespace hvdlite::transport::nccl
