// What every communicator of CUDA memory shares, whatever moves the bytes
// (NCCL: nccl/nccl_communicator.h; the CPU transport through pinned memory:
// host_staged_communicator.h): binding to one GPU, the stream it works on,
// ready waits and done events (Note [Device ordering]), fusion buffers,
// pinned staging, and the watchdog's view of unfinished batches.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/cuda/cuda_runtime.h"
#include "transport/cuda/event_pool.h"
#include "transport/device_communicator.h"

namespace hvdlite::transport::cuda {

// Note [Cost of a call]
// A small allreduce is dominated by fixed costs, which on a GPU are CUDA and
// NCCL calls and host work around them (torch.distributed's is ~15 us on an
// H200). So a collective of one tensor makes, and tests/common/
// test_gpu_call_cost.py pins on the fake GPU: at enqueue the capture check
// and the ready event (Note [Ready at enqueue]); on the background thread
// NCCL's wait for it, the one NCCL call and the done event; at
// synchronize() the consumer stream's wait. The device is set only when it
// changes (useDevice), an Average's NCCL operator is made once (Note
// [Scaled-sum operators] in nccl/nccl_communicator.cc), and no description
// string is built unless something fails.

// What a CUDA communicator takes from its transport (which outlives it).
class DeviceResources {
 public:
  virtual ~DeviceResources() = default;
  // The CUDA runtime, loaded on the first call; throws TransportError.
  virtual std::shared_ptr<const CudaRuntime> runtime() = 0;
  // The one stream of `device` that communicators work on (call with it current).
  virtual cudaStream_t workStream(int device) = 0;
  virtual EventPool& events() = 0;
  // Fused batches are copied with cudaMemcpyBatchAsync (the runtime has it,
  // and HVDLITE_BATCHED_COPIES allows it).
  virtual bool batchedCopies() = 0;
  // Fusion-buffer memory for work on `stream`: the framework's allocator if
  // one is registered, else cudaMallocAsync. Null when the GPU is out of
  // memory; throws, saying why, when an allocator fails otherwise.
  virtual DeviceMemory buffer(int device, size_t bytes, cudaStream_t stream) = 0;
};

class CudaCommunicator : public DeviceCommunicator {
 public:
  // `cpu` must outlive this; `timeout_seconds` bounds host waits (and, in
  // subclasses, communicator creation).
  CudaCommunicator(DeviceResources& resources, Communicator& cpu, double timeout_seconds)
      : resources_(resources), cpu_(cpu), timeout_seconds_(timeout_seconds) {}
  ~CudaCommunicator() override;  // subclasses release their backend first (close() or abort)
  CudaCommunicator(const CudaCommunicator&) = delete;
  CudaCommunicator& operator=(const CudaCommunicator&) = delete;

  int rank() const override { return cpu_.rank(); }
  int size() const override { return cpu_.size(); }
  int globalRank(int r) const override { return cpu_.globalRank(r); }

  void useDevice(int device) override;
  int device() const override { return device_; }
  ThreadCudaState saveThread() override;
  void restoreThread(const ThreadCudaState& state) override;
  void waitFor(void* ready_event, void* stream) override;
  DeviceEvent recordDone(const std::string& what) override;
  void* reserve(size_t bytes, int slot, std::string& failure) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copyMany(const std::vector<DeviceCopy>& copies) override;
  void* stageToHost(const void* device, size_t bytes) override;
  void copyFromHost(void* device, const void* host, size_t bytes) override;
  int firstFailedRank(bool ok) override;
  std::string health(double timeout_seconds) override;
  void abort() override;
  void close() override;

 protected:
  // At the first useDevice(), with `device` current and the stream made:
  // creates what the subclass needs (collective over the set).
  virtual void bind(int device) {}
  // An asynchronous error of the backend ("" when none); thread-safe.
  virtual std::string backendError() { return {}; }
  // Stops the backend's work now (from any thread; may race with a call).
  virtual void abortBackend() {}
  // Clean shutdown: `everyone_ok` says whether every member's GPU work
  // finished (decided alike on every member).
  virtual void closeBackend(bool everyone_ok) {}

  // Host memory for staging in `slot` (0 or 1), at least `bytes`, once no
  // earlier copy from the host still reads it.
  void* pinned(int slot, size_t bytes);
  // Polls `event` until it fired, backing off; throws on abort or timeout.
  void await(cudaEvent_t event, const std::string& what);
  // Throws when abort() was called (`what` names the operation).
  void requireNotAborted(const std::string& what) const;
  std::string where() const;  // "rank R (GPU d)"
  const CudaApi& cuda() const { return runtime_->api(); }
  cudaStream_t stream() const { return stream_; }
  Communicator& cpu() { return cpu_; }
  const Communicator& cpu() const { return cpu_; }
  double timeoutSeconds() const { return timeout_seconds_; }
  bool aborted() const { return aborted_.load(); }

 private:
  // Barrier and messages go through the set's CPU communicator (Note [Device ordering]).
  void doBarrier() final { cpu_.barrier(); }
  std::vector<std::string> doGather(const std::string& mine, int root) final { return cpu_.gather(mine, root); }
  void doBroadcastMessage(std::string& message, int root) final { cpu_.broadcastMessage(message, root); }

  // Sets this rank's device and thread-local capture mode on the calling
  // thread (the watchdog's), once per thread.
  void bindCallingThread();
  bool drained(double seconds);  // every recorded batch finished within `seconds`
  void retireFinished();         // under done_mutex_

  DeviceResources& resources_;
  Communicator& cpu_;
  const double timeout_seconds_;
  std::shared_ptr<const CudaRuntime> runtime_;
  std::atomic<int> device_{-1};
  // Set once the first useDevice() finished: from then on the watchdog may
  // look (runtime_, stream_ and the events no longer change).
  std::atomic<bool> bound_{false};
  cudaStream_t stream_ = nullptr;
  // A wait captures an event's last record when it is queued, so one event
  // serves every ready wait on a stream given without an event.
  cudaEvent_t ready_ = nullptr;
  // The last copy from pinned memory to the GPU; staging waits for it.
  cudaEvent_t staged_ = nullptr;
  bool staging_in_flight_ = false;
  struct Pinned {
    void* data = nullptr;  // cudaMallocHost'd
    size_t bytes = 0;
  };
  Pinned pinned_[2];
  struct Buffer {
    DeviceMemory memory;
    size_t bytes = 0;
  };
  Buffer buffers_[2];
  std::atomic<bool> aborted_{false};
  std::atomic<bool> closed_{false};

  // Batches queued and not known to be finished, oldest first (the watchdog's).
  struct Pending {
    DeviceEvent done;
    std::chrono::steady_clock::time_point queued;
    std::string what;
  };
  std::mutex done_mutex_;
  std::deque<Pending> pending_;
};

}  // namespace hvdlite::transport::cuda
