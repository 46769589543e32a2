#include "transport/cuda/cuda_runtime.h"

#include <algorithm>
#include <cstdint>

#include "common/errors.h"

namespace hvdlite::transport::cuda {
namespace {

// Newest generation first: where a framework loaded none, the newest runtime
// the driver accepts wins (CudaRuntime::load passes over the others).
const std::vector<std::string> kCudartFiles = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};

template <typename Fn>
void resolve(const DynamicLibrary& lib, const char* name, Fn*& out, std::string& missing) {
  out = reinterpret_cast<Fn*>(lib.symbol(name));
  if (!out) missing += std::string(missing.empty() ? "" : ", ") + name;
}

constexpr const char* kInstall =
    "Install a CUDA build of PyTorch (it brings the runtime), or `pip install nvidia-cuda-runtime-cu12` "
    "(CUDA 12) / `pip install nvidia-cuda-runtime` (CUDA 13), or set HVDLITE_CUDART_LIBRARY to the full path "
    "of libcudart.so.13 or libcudart.so.12";

}  // namespace

std::vector<std::string> libraryCandidates(const std::string& exact, const std::vector<std::string>& files,
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

std::vector<std::string> cudartCandidates(const LibrarySearch& search) {
  return libraryCandidates(search.cudart_library, kCudartFiles, search.directories);
}

std::string cudaVersionName(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::shared_ptr<const CudaRuntime> CudaRuntime::load(const LibrarySearch& search) {
  std::string refused;
  std::vector<std::string> seen;  // a file found by several names is tried once
  for (const auto& candidate : cudartCandidates(search)) {
    auto library = std::make_unique<DynamicLibrary>(std::vector<std::string>{candidate});
    if (!library->loaded()) {
      refused += library->failures();
      continue;
    }
    const std::string where = library->location();
    if (std::find(seen.begin(), seen.end(), where) != seen.end()) continue;
    seen.push_back(where);
    std::shared_ptr<CudaRuntime> runtime;
    try {
      runtime = std::make_shared<CudaRuntime>(std::move(library));
    } catch (const TransportError& e) {
      refused += "  " + where + ": " + e.what() + "\n";
      continue;
    }
    const CudaApi& cuda = runtime->api();
    int devices = 0;
    cudaError_t result = cuda.GetDeviceCount(&devices);
    if (result == cudaErrorInsufficientDriver && runtime->driverVersion() == 0) {
      throw TransportError("the CUDA runtime " + where +
                           " finds no NVIDIA driver (cudaDriverGetVersion reports none): install the NVIDIA driver, "
                           "or check that this process can see the GPU (containers: --gpus, the driver's libraries "
                           "mounted)");
    }
    if (result == cudaErrorInsufficientDriver) {
      // A newer runtime than the driver: an older one further down may work.
      refused += "  " + where + ": CUDA " + cudaVersionName(runtime->runtimeVersion()) +
                 " runtime, but the NVIDIA driver supports CUDA " + cudaVersionName(runtime->driverVersion()) +
                 " at most (cudaErrorInsufficientDriver)\n";
      continue;
    }
    if (result != cudaSuccess || devices == 0) {
      std::string why = result != cudaSuccess ? "CUDA error " + std::to_string(result) + " (" +
                                                    cuda.GetErrorString(result) + ")"
                                              : std::string("no device");
      throw TransportError("the CUDA runtime " + where + " finds no usable GPU: " + why +
                           ". Check that the NVIDIA driver is installed and new enough for this runtime, "
                           "and that CUDA_VISIBLE_DEVICES shows a GPU to this process");
    }
    runtime->device_count_ = devices;
    return runtime;
  }
  throw TransportError("the CUDA runtime (libcudart.so.13 or libcudart.so.12) could not be loaded" +
                       (refused.empty() ? std::string(". ") : "; tried:\n" + refused) + kInstall);
}

CudaRuntime::CudaRuntime(std::unique_ptr<DynamicLibrary> library) : library_(std::move(library)) {
  std::string missing;
  const DynamicLibrary& c = *library_;
  resolve(c, "cudaGetDeviceCount", api_.GetDeviceCount, missing);
  resolve(c, "cudaGetDevice", api_.GetDevice, missing);
  resolve(c, "cudaSetDevice", api_.SetDevice, missing);
  resolve(c, "cudaRuntimeGetVersion", api_.RuntimeGetVersion, missing);
  resolve(c, "cudaDriverGetVersion", api_.DriverGetVersion, missing);
  resolve(c, "cudaStreamCreateWithFlags", api_.StreamCreateWithFlags, missing);
  resolve(c, "cudaStreamDestroy", api_.StreamDestroy, missing);
  resolve(c, "cudaStreamWaitEvent", api_.StreamWaitEvent, missing);
  resolve(c, "cudaStreamIsCapturing", api_.StreamIsCapturing, missing);
  resolve(c, "cudaThreadExchangeStreamCaptureMode", api_.ThreadExchangeStreamCaptureMode, missing);
  resolve(c, "cudaEventCreateWithFlags", api_.EventCreateWithFlags, missing);
  resolve(c, "cudaEventDestroy", api_.EventDestroy, missing);
  resolve(c, "cudaEventRecord", api_.EventRecord, missing);
  resolve(c, "cudaEventQuery", api_.EventQuery, missing);
  resolve(c, "cudaMalloc", api_.Malloc, missing);
  resolve(c, "cudaFree", api_.Free, missing);
  resolve(c, "cudaMallocAsync", api_.MallocAsync, missing);
  resolve(c, "cudaFreeAsync", api_.FreeAsync, missing);
  resolve(c, "cudaMallocHost", api_.MallocHost, missing);
  resolve(c, "cudaFreeHost", api_.FreeHost, missing);
  resolve(c, "cudaMemcpyAsync", api_.MemcpyAsync, missing);
  resolve(c, "cudaGetErrorString", api_.GetErrorString, missing);
  if (!missing.empty()) {
    throw TransportError("it lacks " + missing + "; hvdlite needs the CUDA runtime of CUDA 12 or 13");
  }
  // Optional: CUDA 12's header maps cudaGetDeviceProperties to _v2 (the
  // unsuffixed one fills an older layout); CUDA 13 has only the unsuffixed one.
  api_.GetDeviceProperties = reinterpret_cast<decltype(api_.GetDeviceProperties)>(
      c.symbol("cudaGetDeviceProperties_v2") ? c.symbol("cudaGetDeviceProperties_v2")
                                             : c.symbol("cudaGetDeviceProperties"));
  api_.DeviceGetPCIBusId = reinterpret_cast<decltype(api_.DeviceGetPCIBusId)>(c.symbol("cudaDeviceGetPCIBusId"));
  api_.RuntimeGetVersion(&runtime_version_);
  api_.DriverGetVersion(&driver_version_);
  // Optional, and its signature depends on the generation (cuda_api.h).
  void* batch = c.symbol("cudaMemcpyBatchAsync");
  if (batch && runtime_version_ >= 13000) {
    api_.MemcpyBatchAsync13 = reinterpret_cast<decltype(api_.MemcpyBatchAsync13)>(batch);
  } else if (batch && runtime_version_ >= 12080) {
    api_.MemcpyBatchAsync12 = reinterpret_cast<decltype(api_.MemcpyBatchAsync12)>(batch);
  }
}

void checkCuda(const CudaApi& cuda, cudaError_t result, const std::string& what) {
  if (result == cudaSuccess) return;
  std::string text = what + " failed: CUDA error " + std::to_string(result) + " (" + cuda.GetErrorString(result) + ")";
  if (result >= cudaErrorStreamCaptureFirst && result <= cudaErrorStreamCaptureLast) {
    text += ": a CUDA graph capture is in progress on this stream or thread; hvdlite's collectives cannot be "
            "captured (they are negotiated among the ranks at run time): run them outside the captured region";
  }
  throw TransportError(text);
}

OnDevice::OnDevice(const CudaApi& cuda, int device) : cuda_(cuda) {
  checkCuda(cuda_, cuda_.GetDevice(&previous_), "cudaGetDevice");
  if (previous_ == device) return;
  checkCuda(cuda_, cuda_.SetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  switched_ = true;
}

OnDevice::~OnDevice() {
  if (switched_) cuda_.SetDevice(previous_);
}

ThreadLocalCaptureMode::ThreadLocalCaptureMode(const CudaApi& cuda) : cuda_(cuda) {
  cuda_.ThreadExchangeStreamCaptureMode(&previous_);
}

ThreadLocalCaptureMode::~ThreadLocalCaptureMode() {
  if (previous_ != kCaptureModeThreadLocal) cuda_.ThreadExchangeStreamCaptureMode(&previous_);
}

bool isCapturing(const CudaApi& cuda, cudaStream_t stream) {
  int status = kCaptureStatusNone;
  cudaError_t result = cuda.StreamIsCapturing(stream, &status);
  if (result >= cudaErrorStreamCaptureFirst && result <= cudaErrorStreamCaptureLast) return true;
  checkCuda(cuda, result, "cudaStreamIsCapturing");
  return status != kCaptureStatusNone;
}

bool isDefaultStream(cudaStream_t stream) { return reinterpret_cast<uintptr_t>(stream) <= 2; }

}  // namespace hvdlite::transport::cuda
