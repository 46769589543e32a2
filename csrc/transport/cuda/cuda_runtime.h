// Finds and loads the CUDA runtime (libcudart, CUDA 12 or 13) at run time,
// so that one hvdlite build runs on machines with and without GPUs, and with
// either generation of the CUDA wheels a framework brings.
//
// Note [GPU library search]
// Each library (the CUDA runtime here, NCCL in nccl/nccl_library.h) is
// looked for, in order:
//   1. the file named by HVDLITE_CUDART_LIBRARY / HVDLITE_NCCL_LIBRARY, and only that;
//   2. a copy already loaded into this process (e.g. by PyTorch), so that
//      there is one CUDA runtime and one NCCL, the framework's;
//   3. each directory of HVDLITE_GPU_LIBRARY_PATH, in order: hvdlite's Python
//      layer appends the nvidia-* wheels' lib folders (nvidia/cu13/lib,
//      nvidia/cuda_runtime/lib, nvidia/nccl/lib), then torch/lib
//      (hvdlite/common/gpu_library_search.py);
//   4. the system's default search path (LD_LIBRARY_PATH, ldconfig).
// In 2-4 the CUDA runtime is libcudart.so.13, then .12, then libcudart.so;
// one whose driver is too old (cudaErrorInsufficientDriver: a CUDA 13 runtime
// on a CUDA 12 driver) is passed over for the next candidate.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/cuda/cuda_api.h"
#include "transport/cuda/dynamic_library.h"

namespace hvdlite::transport::cuda {

struct LibrarySearch {
  std::string nccl_library;    // HVDLITE_NCCL_LIBRARY; "" = search
  std::string cudart_library;  // HVDLITE_CUDART_LIBRARY; "" = search
  std::vector<std::string> directories;  // HVDLITE_GPU_LIBRARY_PATH
};

// The places to try for `files`, in the order of Note [GPU library search].
std::vector<std::string> libraryCandidates(const std::string& exact, const std::vector<std::string>& files,
                                           const std::vector<std::string>& directories);
std::vector<std::string> cudartCandidates(const LibrarySearch& search);

// The CUDA runtime, loaded, with every entry point hvdlite calls resolved.
class CudaRuntime {
 public:
  // Throws TransportError saying which files were tried and why each was
  // refused, and what to install or set; also when the runtime sees no GPU.
  static std::shared_ptr<const CudaRuntime> load(const LibrarySearch& search);

  const CudaApi& api() const { return api_; }
  std::string location() const { return library_->location(); }
  int runtimeVersion() const { return runtime_version_; }  // e.g. 13000
  int driverVersion() const { return driver_version_; }    // the newest CUDA the driver supports
  int deviceCount() const { return device_count_; }  // the GPUs this process sees (CUDA_VISIBLE_DEVICES)
  // cudaMemcpyBatchAsync is there (CUDA >= 12.8): a fused batch is packed
  // and unpacked in one call each.
  bool batchedCopies() const { return api_.MemcpyBatchAsync12 || api_.MemcpyBatchAsync13; }

  // Resolves `library`'s entry points; throws TransportError naming what it lacks.
  explicit CudaRuntime(std::unique_ptr<DynamicLibrary> library);

 private:
  std::unique_ptr<DynamicLibrary> library_;
  CudaApi api_{};
  int runtime_version_ = 0;
  int driver_version_ = 0;
  int device_count_ = 0;
};

// "13.0" for 13000.
std::string cudaVersionName(int version);

// Throws TransportError with `what` and the CUDA error's text when a call
// failed (and, for stream-capture errors, what that means for hvdlite).
void checkCuda(const CudaApi& cuda, cudaError_t result, const std::string& what);

// Makes `device` the calling thread's current device for one scope and sets
// the previous one back: CUDA ties events and the default streams to the
// current device, and a framework's thread must not see it change.
class OnDevice {
 public:
  OnDevice(const CudaApi& cuda, int device);
  ~OnDevice();
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  const CudaApi& cuda_;
  int previous_ = 0;
  bool switched_ = false;
};

// Note [Threads and stream capture]
// While a framework captures a CUDA graph (torch.cuda.graph) in the default
// "global" mode, any other thread in global mode that makes a call CUDA
// deems unsafe during capture (cudaEventQuery, cudaMalloc, a synchronize...)
// invalidates that capture. hvdlite's own threads (the background thread and
// the watchdog) query events and allocate while the user's program runs, so
// they work in thread-local mode, where such calls are allowed and leave
// other threads' captures alone (what PyTorch's NCCL watchdog does). The mode
// is per thread: a scope that switches a framework thread's mode sets it back.
class ThreadLocalCaptureMode {
 public:
  explicit ThreadLocalCaptureMode(const CudaApi& cuda);
  ~ThreadLocalCaptureMode();
  ThreadLocalCaptureMode(const ThreadLocalCaptureMode&) = delete;
  ThreadLocalCaptureMode& operator=(const ThreadLocalCaptureMode&) = delete;

 private:
  const CudaApi& cuda_;
  int previous_ = kCaptureModeThreadLocal;
};

// True when `stream` (on the calling thread's current device) is being
// captured into a CUDA graph, or is the legacy default stream while another
// stream captures (cudaErrorStreamCaptureImplicit).
bool isCapturing(const CudaApi& cuda, cudaStream_t stream);

// Null, cudaStreamLegacy (1) and cudaStreamPerThread (2) name the current
// device's default stream.
bool isDefaultStream(cudaStream_t stream);

}  // namespace hvdlite::transport::cuda
