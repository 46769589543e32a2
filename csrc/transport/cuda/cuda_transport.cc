#include "transport/cuda/cuda_transport.h"

#include <map>
#include <mutex>
#include <optional>

#include "common/errors.h"
#include "transport/cuda/cuda_communicator.h"
#include "transport/cuda/event_pool.h"
#include "transport/cuda/host_staged_communicator.h"
#include "transport/nccl/nccl_communicator.h"
#include "transport/nccl/nccl_library.h"

namespace hvdlite::transport {
namespace cuda {
namespace {

LibrarySearch searchFrom(const DeviceTransportOptions& options) {
  LibrarySearch search;
  search.nccl_library = options.nccl_library;
  search.cudart_library = options.cudart_library;
  size_t start = 0;
  while (start <= options.library_path.size()) {
    size_t end = options.library_path.find(':', start);
    if (end == std::string::npos) end = options.library_path.size();
    if (end > start) search.directories.push_back(options.library_path.substr(start, end - start));
    start = end + 1;
  }
  return search;
}

bool usesNccl(const DeviceTransportOptions& options) { return options.operations != "host"; }

// Loads once; a failure is remembered, so that every later CUDA tensor gets
// the same message without searching again.
template <typename Library>
class Once {
 public:
  template <typename Load>
  std::shared_ptr<const Library> get(Load&& load) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!library_ && failure_.empty()) {
      try {
        library_ = load();
      } catch (const TransportError& e) {
        failure_ = e.what();
      }
    }
    if (!library_) throw TransportError(failure_);
    return library_;
  }

 private:
  std::mutex mutex_;
  std::shared_ptr<const Library> library_;
  std::string failure_;
};

class CudaTransport final : public DeviceTransport, public DeviceResources {
 public:
  explicit CudaTransport(const DeviceTransportOptions& options)
      : options_(options), search_(searchFrom(options)) {}
  // After every communicator (the runtime destroys its process sets first).
  ~CudaTransport() override {
    for (auto& [device, stream] : streams_) runtime_->api().StreamDestroy(stream);
  }

  // ---- DeviceTransport
  void requireAvailable() override {
    runtime();
    if (usesNccl(options_)) nccl();
  }

  void requireReducible(DataType dtype) const override {
    if (usesNccl(options_)) nccl::ncclType(dtype);  // the CPU transport reduces every dtype
  }

  int visibleDevices() override { return runtime()->deviceCount(); }

  std::unique_ptr<DeviceCommunicator> communicator(Communicator& cpu) override {
    if (!usesNccl(options_)) return std::make_unique<HostStagedCommunicator>(*this, cpu, options_.timeout_seconds);
    return std::make_unique<nccl::NcclCommunicator>([this] { return nccl(); }, *this, cpu,
                                                    options_.timeout_seconds);
  }

  DeviceMemory allocate(int device, size_t bytes) override {
    auto rt = runtime();
    const auto& api = rt->api();
    void* data = nullptr;
    cudaError_t result;
    {
      OnDevice on(api, device);
      result = api.Malloc(&data, std::max<size_t>(bytes, 1));
    }
    checkCuda(api, result, "allocating " + std::to_string(bytes) + " bytes on GPU " + std::to_string(device));
    return DeviceMemory(data, [rt](void* p) { rt->api().Free(p); });
  }

  DeviceEvent recordReady(int device, void* stream, const std::function<std::string()>& what) override {
    auto rt = runtime();
    auto s = static_cast<cudaStream_t>(stream);
    {
      // A default stream is the current device's: ask about `device`'s.
      std::optional<OnDevice> on;
      if (isDefaultStream(s)) on.emplace(rt->api(), device);
      if (isCapturing(rt->api(), s)) {
        throw InvalidArgument(
            what() + ": its CUDA stream is being captured into a CUDA graph (torch.cuda.graph, "
                   "cudaStreamBeginCapture). hvdlite's collectives are negotiated among the ranks on the host "
                   "each time they run, so they cannot be recorded into a graph and replayed: call them outside "
                   "the captured region (e.g. allreduce the gradients after graph.replay())");
      }
    }
    return events().record(device, s);
  }

  void waitOn(int device, void* stream, const DeviceEvent& event) override {
    auto rt = runtime();
    auto s = static_cast<cudaStream_t>(stream);
    std::optional<OnDevice> on;
    if (isDefaultStream(s)) on.emplace(rt->api(), device);
    checkCuda(rt->api(), rt->api().StreamWaitEvent(s, static_cast<cudaEvent_t>(event.get()), 0),
              "making the stream that reads the result wait for the collective (cudaStreamWaitEvent)");
  }

  void copyOnStream(int device, void* stream, void* dst, const void* src, size_t bytes) override {
    auto rt = runtime();
    OnDevice on(rt->api(), device);
    checkCuda(rt->api(),
              rt->api().MemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)),
              "copying " + std::to_string(bytes) + " bytes on GPU " + std::to_string(device) + " (cudaMemcpyAsync)");
  }

  void* stream(int device) override {
    auto rt = runtime();
    OnDevice on(rt->api(), device);
    return workStream(device);
  }

  void setBufferAllocator(BufferAllocator allocator) override {
    std::lock_guard<std::mutex> lock(mutex_);
    buffer_allocator_ = std::move(allocator);
  }

  GpuLibraryReport report() override {
    GpuLibraryReport r;
    r.operations = usesNccl(options_) ? "nccl" : "host";
    try {
      auto rt = runtime();
      r.cuda_runtime = rt->location();
      r.cuda_runtime_version = rt->runtimeVersion();
      r.cuda_driver_version = rt->driverVersion();
      r.batched_copies = options_.batched_copies && rt->batchedCopies();
    } catch (const TransportError& e) {
      r.error = e.what();
    }
    if (usesNccl(options_)) {
      try {
        auto n = nccl();
        r.nccl = n->location();
        r.nccl_version = n->version();
      } catch (const TransportError& e) {
        if (r.error.empty()) r.error = e.what();
      }
    }
    return r;
  }

  // ---- DeviceResources
  std::shared_ptr<const CudaRuntime> runtime() override {
    auto rt = runtime_once_.get([this] { return CudaRuntime::load(search_); });
    std::lock_guard<std::mutex> lock(mutex_);
    if (!runtime_) {
      runtime_ = rt;
      events_ = std::make_shared<EventPool>(rt);
    }
    return rt;
  }

  // One stream per GPU, shared by its communicators, so that their work is
  // ordered and each batch needs one done event (Note [Device ordering]).
  // Called with `device` current.
  cudaStream_t workStream(int device) override {
    auto rt = runtime();
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = streams_.find(device);
    if (it != streams_.end()) return it->second;
    cudaStream_t created = nullptr;
    checkCuda(rt->api(), rt->api().StreamCreateWithFlags(&created, kCudaStreamNonBlocking),
              "cudaStreamCreateWithFlags");
    streams_[device] = created;
    return created;
  }

  bool batchedCopies() override { return options_.batched_copies && runtime()->batchedCopies(); }

  EventPool& events() override {
    runtime();
    return *events_;
  }

  DeviceMemory buffer(int device, size_t bytes, cudaStream_t stream) override {
    BufferAllocator allocator;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      allocator = buffer_allocator_;
    }
    if (allocator) return allocator(device, bytes, stream);
    auto rt = runtime();
    void* data = nullptr;
    cudaError_t result = rt->api().MallocAsync(&data, std::max<size_t>(bytes, 1), stream);
    if (result == cudaErrorMemoryAllocation) return nullptr;
    checkCuda(rt->api(), result, "cudaMallocAsync of a " + std::to_string(bytes) + "-byte fusion buffer");
    // Freed in stream order: work queued on `stream` that uses it runs first.
    return DeviceMemory(data, [rt, stream](void* p) { rt->api().FreeAsync(p, stream); });
  }

 private:
  std::shared_ptr<const nccl::NcclLibrary> nccl() {
    return nccl_once_.get([this] { return nccl::NcclLibrary::load(search_); });
  }

  const DeviceTransportOptions options_;
  const LibrarySearch search_;
  Once<CudaRuntime> runtime_once_;
  Once<nccl::NcclLibrary> nccl_once_;
  std::mutex mutex_;
  std::shared_ptr<const CudaRuntime> runtime_;
  // Shared: entries and handles hold its events, and may outlive the transport.
  std::shared_ptr<EventPool> events_;
  std::map<int, cudaStream_t> streams_;
  BufferAllocator buffer_allocator_;
};

}  // namespace

std::unique_ptr<DeviceTransport> makeTransport(const DeviceTransportOptions& options) {
  return std::make_unique<CudaTransport>(options);
}

}  // namespace cuda

int ncclVersion(const DeviceTransportOptions& options) { return nccl::ncclVersion(cuda::searchFrom(options)); }

std::string cudaVersionText(int version) { return version > 0 ? cuda::cudaVersionName(version) : "none"; }

GpuLibraryReport gpuLibraryReport(const DeviceTransportOptions& options) {
  return cuda::makeTransport(options)->report();
}

}  // namespace hvdlite::transport
