#include "transport/cuda/cuda_communicator.h"

#include <cstdio>
#include <cstring>
#include <thread>

#include "common/errors.h"

namespace hvdlite::transport::cuda {
namespace {

// Whether the calling thread is known to be in thread-local capture mode
// (Note [Threads and stream capture]): set once per hvdlite thread, and
// forgotten when a framework thread's own mode is set back.
thread_local bool tl_capture_mode_local = false;
// The calling thread's current device as hvdlite last set or read it (-1:
// unknown). hvdlite's own threads change it only here; a framework thread
// that runs a batch has it read in saveThread() and set back in
// restoreThread(), so it is never stale when useDevice() trusts it.
thread_local int tl_current_device = -1;

void enterThreadLocalCaptureMode(const CudaApi& cuda) {
  if (tl_capture_mode_local) return;
  int mode = kCaptureModeThreadLocal;
  checkCuda(cuda, cuda.ThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
  tl_capture_mode_local = true;
}

bool inside(const void* p, const void* base, size_t bytes) {
  auto* c = static_cast<const char*>(p);
  auto* b = static_cast<const char*>(base);
  return base && c >= b && c < b + bytes;
}

}  // namespace

CudaCommunicator::~CudaCommunicator() {
  if (!runtime_) return;
  try {
    // A copy from pinned memory may still read it; after an abort the
    // stream drains by itself.
    if (staging_in_flight_ && !aborted_) await(staged_, "a copy from the host, at shutdown");
  } catch (const std::exception&) {
  }
  for (auto& p : pinned_) {
    if (p.data) cuda().FreeHost(p.data);
  }
  for (auto* event : {ready_, staged_}) {
    if (event) cuda().EventDestroy(event);
  }
  // buffers_ go back to their allocator (stream-ordered) and pending_'s
  // events to the pool after this body.
}

std::string CudaCommunicator::where() const {
  return "rank " + std::to_string(globalRank(rank())) + " (GPU " + std::to_string(device_) + ")";
}

void CudaCommunicator::useDevice(int device) {
  if (device_ >= 0 && device != device_) {
    throw TransportError("a tensor is on GPU " + std::to_string(device) + " but rank " +
                         std::to_string(globalRank(rank())) + "'s " + describe() +
                         " communicator for this process set is on GPU " + std::to_string(device_) +
                         "; hvdlite uses one GPU per rank: pin it with torch.cuda.set_device(hvd.local_rank() % "
                         "torch.cuda.device_count()) and keep every tensor there (docs/gpus.md)");
  }
  if (!runtime_) runtime_ = resources_.runtime();
  // Once per thread and device, not per batch (Note [Cost of a call]).
  if (tl_current_device != device) {
    cudaError_t result = cuda().SetDevice(device);
    if (result != cudaSuccess) checkCuda(cuda(), result, "cudaSetDevice(" + std::to_string(device) + ")");
    tl_current_device = device;
  }
  enterThreadLocalCaptureMode(cuda());
  if (device_ >= 0) return;
  device_ = device;
  stream_ = resources_.workStream(device);
  checkCuda(cuda(), cuda().EventCreateWithFlags(&ready_, kCudaEventDisableTiming), "cudaEventCreateWithFlags");
  checkCuda(cuda(), cuda().EventCreateWithFlags(&staged_, kCudaEventDisableTiming), "cudaEventCreateWithFlags");
  bound_ = true;
  try {
    bind(device);
  } catch (const std::exception&) {
    abort();  // never used half made: every later call fails instead
    throw;
  }
}

ThreadCudaState CudaCommunicator::saveThread() {
  if (!runtime_) runtime_ = resources_.runtime();
  ThreadCudaState state;
  checkCuda(cuda(), cuda().GetDevice(&state.device), "cudaGetDevice");
  tl_current_device = state.device;
  int mode = kCaptureModeThreadLocal;
  checkCuda(cuda(), cuda().ThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
  state.capture_mode = mode;
  tl_capture_mode_local = true;
  return state;
}

void CudaCommunicator::restoreThread(const ThreadCudaState& state) {
  if (state.device >= 0 && state.device != tl_current_device) cuda().SetDevice(state.device);
  tl_current_device = state.device;
  if (state.capture_mode >= 0 && state.capture_mode != kCaptureModeThreadLocal) {
    int mode = state.capture_mode;
    cuda().ThreadExchangeStreamCaptureMode(&mode);
    tl_capture_mode_local = false;
  }
}

void CudaCommunicator::bindCallingThread() {
  // Only the watchdog calls this, and nothing else changes that thread's
  // device: remembering it keeps each poll down to its event queries.
  if (tl_current_device != device_) {
    checkCuda(cuda(), cuda().SetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")");
    tl_current_device = device_;
  }
  enterThreadLocalCaptureMode(cuda());
}

void CudaCommunicator::waitFor(void* ready_event, void* stream) {
  auto event = static_cast<cudaEvent_t>(ready_event);
  if (!event) {
    cudaError_t recorded = cuda().EventRecord(ready_, static_cast<cudaStream_t>(stream));
    if (recorded != cudaSuccess) checkCuda(cuda(), recorded, "recording the framework stream's ready event");
    event = ready_;
  }
  cudaError_t waited = cuda().StreamWaitEvent(stream_, event, 0);
  if (waited != cudaSuccess) checkCuda(cuda(), waited, "waiting for the framework's ready event");
}

DeviceEvent CudaCommunicator::recordDone(const std::string& what) {
  DeviceEvent done = resources_.events().record(device_, stream_);
  std::lock_guard<std::mutex> lock(done_mutex_);
  pending_.push_back({done, std::chrono::steady_clock::now(), what});
  return done;
}

void CudaCommunicator::retireFinished() {
  while (!pending_.empty() &&
         cuda().EventQuery(static_cast<cudaEvent_t>(pending_.front().done.get())) == cudaSuccess) {
    pending_.pop_front();
  }
}

bool CudaCommunicator::drained(double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(done_mutex_);
      retireFinished();
      if (pending_.empty()) return true;
    }
    if (aborted_ || std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void* CudaCommunicator::reserve(size_t bytes, int slot, std::string& failure) {
  HVD_CHECK(slot == 0 || slot == 1, "device buffer slot ", slot);
  Buffer& buffer = buffers_[slot];
  if (buffer.memory && bytes <= buffer.bytes) return buffer.memory.get();
  // Freed first, so that the allocator can hand the memory out again. In
  // stream order: work queued on stream_ that still uses it runs first
  // (cudaFreeAsync, or a framework block allocated under stream_).
  buffer = Buffer{};
  DeviceMemory memory;
  try {
    memory = resources_.buffer(device_, bytes, stream_);
  } catch (const std::exception& e) {
    failure = "allocating a " + std::to_string(bytes) + "-byte fusion buffer on its GPU " +
              std::to_string(device_) + " failed: " + e.what();
    return nullptr;
  }
  if (!memory) {
    failure = "its GPU " + std::to_string(device_) + " is out of memory for a " + std::to_string(bytes) +
              "-byte fusion buffer";
    return nullptr;
  }
  buffer = Buffer{memory, bytes};
  return memory.get();
}

void CudaCommunicator::copy(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  checkCuda(cuda(), cuda().MemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
}

void CudaCommunicator::copyMany(const std::vector<DeviceCopy>& copies) {
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<size_t> sizes;
  for (const auto& c : copies) {
    if (c.dst == c.src || c.bytes == 0) continue;
    dsts.push_back(c.dst);
    srcs.push_back(c.src);
    sizes.push_back(c.bytes);
  }
  if (dsts.size() < 2 || !resources_.batchedCopies()) {
    for (size_t i = 0; i < dsts.size(); ++i) copy(dsts[i], srcs[i], sizes[i]);
    return;
  }
  // One attribute for every copy: sources read in stream order (after the
  // ready waits queued before), both ends on this GPU.
  cudaMemcpyAttributes attributes{};
  attributes.srcAccessOrder = kMemcpySrcAccessOrderStream;
  attributes.srcLocHint = {kMemLocationTypeDevice, device_};
  attributes.dstLocHint = {kMemLocationTypeDevice, device_};
  size_t first = 0;
  cudaError_t result;
  if (cuda().MemcpyBatchAsync13) {
    result = cuda().MemcpyBatchAsync13(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &attributes, &first, 1,
                                       stream_);
  } else {
    size_t failed_at = 0;
    result = cuda().MemcpyBatchAsync12(dsts.data(), const_cast<void**>(srcs.data()), sizes.data(), dsts.size(),
                                       &attributes, &first, 1, &failed_at, stream_);
  }
  checkCuda(cuda(), result, "cudaMemcpyBatchAsync of " + std::to_string(dsts.size()) + " tensors");
}

void* CudaCommunicator::pinned(int slot, size_t bytes) {
  if (staging_in_flight_) {
    await(staged_, "a copy from the host");
    staging_in_flight_ = false;
  }
  Pinned& p = pinned_[slot];
  if (bytes > p.bytes || !p.data) {
    if (p.data) cuda().FreeHost(p.data);
    p = Pinned{};
    checkCuda(cuda(), cuda().MallocHost(&p.data, std::max<size_t>(bytes, 1)),
              "allocating " + std::to_string(bytes) + " bytes of pinned host memory");
    p.bytes = std::max<size_t>(bytes, 1);
  }
  return p.data;
}

void* CudaCommunicator::stageToHost(const void* device, size_t bytes) {
  void* host = pinned(0, bytes);
  checkCuda(cuda(), cuda().MemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_), "copying to the host");
  checkCuda(cuda(), cuda().EventRecord(staged_, stream_), "recording a copy to the host");
  await(staged_, "a copy to the host");
  return host;
}

void CudaCommunicator::copyFromHost(void* device, const void* host, size_t bytes) {
  if (!inside(host, pinned_[0].data, pinned_[0].bytes) && !inside(host, pinned_[1].data, pinned_[1].bytes)) {
    void* staging = pinned(0, bytes);
    std::memcpy(staging, host, bytes);
    host = staging;
  }
  checkCuda(cuda(), cuda().MemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_), "copying from the host");
  checkCuda(cuda(), cuda().EventRecord(staged_, stream_), "recording a copy from the host");
  staging_in_flight_ = true;  // the next staging waits for it, not this call
}

void CudaCommunicator::await(cudaEvent_t event, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds_);
  auto pause = std::chrono::microseconds(5);
  for (;;) {
    cudaError_t result = cuda().EventQuery(event);
    if (result == cudaSuccess) return;
    if (result != cudaErrorNotReady) checkCuda(cuda(), result, what);
    requireNotAborted(what);
    if (std::chrono::steady_clock::now() > deadline) {
      throw Timeout(what + " on " + where() + " did not finish within " + std::to_string(timeout_seconds_) +
                    " s (HVDLITE_NCCL_TIMEOUT_SECONDS)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

void CudaCommunicator::requireNotAborted(const std::string& what) const {
  if (aborted_) throw TransportError(what + " on " + where() + ": device work was aborted after an earlier failure");
}

int CudaCommunicator::firstFailedRank(bool ok) {
  int32_t first = ok ? size() : rank();
  cpu_.allreduce(&first, 1, DataType::kInt32, ReduceOp::kMin);
  return first;
}

std::string CudaCommunicator::health(double timeout_seconds) {
  if (!bound_ || aborted_ || closed_) return {};
  bindCallingThread();
  std::string error = backendError();
  if (!error.empty()) return error;
  std::lock_guard<std::mutex> lock(done_mutex_);
  retireFinished();
  if (pending_.empty()) return {};
  const double age = std::chrono::duration<double>(std::chrono::steady_clock::now() - pending_.front().queued).count();
  if (age <= timeout_seconds) return {};
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", age);
  return pending_.front().what + " on " + where() + " was queued on the GPU " + seconds +
         " s ago and has not finished (HVDLITE_NCCL_TIMEOUT_SECONDS=" + std::to_string(timeout_seconds) +
         "): a peer probably died, hangs, or never reached this collective";
}

void CudaCommunicator::abort() {
  if (aborted_.exchange(true)) return;
  abortBackend();
}

void CudaCommunicator::close() {
  if (closed_) return;
  // Whether this set ever ran device work is alike on every member (the
  // first device response binds them all), so either all talk here or none.
  if (device_ < 0) {
    closed_ = true;
    return;
  }
  bool ok = !aborted_ && drained(timeout_seconds_) && backendError().empty();
  bool everyone_ok = false;
  try {
    everyone_ok = firstFailedRank(ok) == size();
  } catch (const std::exception&) {
    everyone_ok = false;  // the CPU transport broke: nobody finalizes
  }
  closeBackend(everyone_ok && !aborted_);
  closed_ = true;
}

}  // namespace hvdlite::transport::cuda
