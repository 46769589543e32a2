// The DeviceTransport of CUDA tensors: NCCL communicators, device memory, and
// loading the libraries once, on first need.
#include <map>
#include <mutex>

#include "common/errors.h"
#include "transport/device_communicator.h"
#include "transport/nccl/libraries.h"
#include "transport/nccl/nccl_communicator.h"
#include "transport/nccl/nccl_transport.h"
#include "transport/nccl/ready_events.h"

namespace hvdlite::transport {
namespace {

nccl::LibrarySearch searchFrom(const DeviceTransportOptions& options) {
  nccl::LibrarySearch search;
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

class NcclTransport final : public DeviceTransport {
 public:
  explicit NcclTransport(const DeviceTransportOptions& options)
      : search_(searchFrom(options)), timeout_seconds_(options.timeout_seconds) {}
  // After every communicator (the runtime destroys its process sets first).
  ~NcclTransport() override {
    for (auto& [device, stream] : streams_) libraries_->cuda().StreamDestroy(stream);
  }

  void requireAvailable() override { libraries(); }

  void requireReducible(DataType dtype) const override { nccl::ncclType(dtype); }

  std::unique_ptr<DeviceCommunicator> communicator(Communicator& cpu) override {
    return std::make_unique<nccl::NcclCommunicator>([this] { return libraries(); },
                                                    [this](int device) { return streamFor(device); }, cpu,
                                                    timeout_seconds_);
  }

  DeviceMemory allocate(int device, size_t bytes) override {
    auto libs = libraries();
    const auto& cuda = libs->cuda();
    int previous = 0;
    nccl::checkCuda(cuda, cuda.GetDevice(&previous), "cudaGetDevice");
    nccl::checkCuda(cuda, cuda.SetDevice(device), "cudaSetDevice");
    void* data = nullptr;
    auto result = cuda.Malloc(&data, std::max<size_t>(bytes, 1));
    cuda.SetDevice(previous);
    nccl::checkCuda(cuda, result,
                    ("allocating " + std::to_string(bytes) + " bytes on GPU " + std::to_string(device)).c_str());
    return DeviceMemory(data, [libs](void* p) { libs->cuda().Free(p); });
  }

  DeviceEvent recordReady(int device, void* stream) override {
    libraries();
    return ready_events_->record(device, static_cast<nccl::cudaStream_t>(stream));
  }

  void* stream(int device) override {
    libraries();
    return streamFor(device);
  }

 private:
  // One NCCL stream per GPU, shared by its communicators, so that their work
  // is ordered and each batch needs one done event (Note [Device ordering]).
  nccl::cudaStream_t streamFor(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = streams_.find(device);
    if (it != streams_.end()) return it->second;
    const auto& cuda = libraries_->cuda();
    nccl::cudaStream_t stream = nullptr;
    nccl::checkCuda(cuda, cuda.StreamCreateWithFlags(&stream, nccl::kCudaStreamNonBlocking),
                    "cudaStreamCreateWithFlags");
    streams_[device] = stream;
    return stream;
  }

  // Loads once; a failure is remembered, so every later CUDA tensor gets the
  // same message without searching again.
  std::shared_ptr<const nccl::GpuLibraries> libraries() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!libraries_ && failure_.empty()) {
      try {
        libraries_ = nccl::GpuLibraries::load(search_);
        ready_events_ = std::make_shared<nccl::ReadyEvents>(libraries_);
      } catch (const TransportError& e) {
        failure_ = e.what();
      }
    }
    if (!libraries_) throw TransportError(failure_);
    return libraries_;
  }

  nccl::LibrarySearch search_;
  std::mutex mutex_;
  std::shared_ptr<const nccl::GpuLibraries> libraries_;
  std::string failure_;
  const double timeout_seconds_;
  std::map<int, nccl::cudaStream_t> streams_;
  // Shared: entries hold its events, and may outlive the transport.
  std::shared_ptr<nccl::ReadyEvents> ready_events_;
};

}  // namespace

namespace nccl {
std::unique_ptr<DeviceTransport> makeTransport(const DeviceTransportOptions& options) {
  return std::make_unique<NcclTransport>(options);
}
}  // namespace nccl

int ncclVersion(const DeviceTransportOptions& options) { return nccl::ncclVersion(searchFrom(options)); }

}  // namespace hvdlite::transport
