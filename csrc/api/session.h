// The process's one Session: at most one Runtime, and the handles of operations
// started from Python until they are synchronized. It lives in libhvdlite so
// that every binding loaded into the process (hvdlite._core, the TensorFlow op
// library through api.h) shares the same Runtime.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/call_site.h"
#include "core/runtime.h"

namespace hvdlite::api {

// Completion state of one operation, shared by the core's callback (on the
// thread that runs the cycle) and the Python thread that waits on it.
struct Handle {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  core::Status status;
  std::unique_ptr<uint8_t[]> output;              // outputs the core had to allocate
  core::DeviceMemory device_output;               // the same, for CUDA tensors
  int32_t device = -1;                            // the GPU of the operation's tensors
  // CUDA: the batch's done event, and the stream the tensor was submitted on
  // (Note [Completion on the consumer's stream] in transport/device_communicator.h).
  core::DeviceMemory done_event;
  void* stream = nullptr;
  std::vector<int64_t> output_shape;
  std::vector<int64_t> received_splits;
  int32_t value = -1;
  // For the report of a long wait (Note [Stalled synchronize]).
  OpType op = OpType::kAllreduce;
  std::string name;
  std::chrono::steady_clock::time_point wait_started{};  // first wait() on it
  std::chrono::steady_clock::time_point next_report{};

  bool isDone();
};

// Note [Outputs from the framework's allocator]
// The output of a CUDA allgather, alltoall or reducescatter is sized by
// negotiation, so the core allocates it, on the thread of the batch. A
// framework with a caching allocator (PyTorch) holds most free GPU memory in
// its cache, where cudaMalloc cannot reach it, and a cudaFree of an output on
// the Python thread synchronizes the device. So a binding may register a
// DeviceAllocator: it gets the GPU, the size, the entry's stream (where the
// framework will use the output) and the NCCL stream (which writes it), and
// must hand back memory that NCCL may write in that stream's order and that
// the framework does not reuse before the entry's stream is done with it
// (torch: allocated under the NCCL stream, record_stream on the entry's
// stream; hvdlite/torch/cuda.py says why). It runs on the background thread;
// if it throws, that one operation fails on every rank with an out-of-memory
// error (Note [Allocation failures] in core/device_executor.cc). Without one,
// the core allocates with cudaMalloc.
struct DeviceAllocation {
  int device;
  size_t bytes;
  void* stream;       // the entry's (cudaStream_t)
  void* nccl_stream;  // the one NCCL writes on
};
using DeviceAllocator = std::function<core::DeviceMemory(const DeviceAllocation&)>;

class Session {
 public:
  // For every later CUDA output; empty: cudaMalloc. Process-wide.
  void setDeviceAllocator(DeviceAllocator allocator);

  // mpi_comm: Fortran handle of the communicator from init(comm=...), or -1.
  void init(const std::map<std::string, std::string>& env,
            const std::vector<std::vector<int>>& process_sets, int64_t mpi_comm = -1);
  void shutdown();
  bool initialized() const;
  // InvalidArgument if not initialized. Shared, so that a framework thread
  // using it while Python shuts down never sees it destroyed under its feet.
  std::shared_ptr<core::Runtime> runtime() const;

  // Queues an entry whose callback and allocator the caller set (framework
  // bindings that complete their own way).
  void enqueueDirect(core::TensorEntryPtr entry, bool wake_background = true);

  // Queues an entry; returns its handle id. wake_background=false when the
  // caller waits for it next (it will run the cycle itself).
  int64_t enqueue(core::TensorEntryPtr entry, bool wake_background = true);
  bool poll(int64_t handle) const;
  // Blocks until done or `deadline` (call without the GIL): returns the
  // handle, forgotten, once done, or null at the deadline (call again). Runs
  // the runtime's cycles meanwhile when no other thread does. A wait past the
  // stall check time is reported (Note [Stalled synchronize]).
  std::shared_ptr<Handle> wait(int64_t handle, std::chrono::steady_clock::time_point deadline =
                                                   std::chrono::steady_clock::time_point::max());
  // The thread waiting for `handle` gives up: `exception` (e.g.
  // KeyboardInterrupt) was raised in it. Stops collectives here and on every
  // peer with a message naming this rank (Runtime::abort), waits a bounded
  // time for the core to let go of the handle's buffers, and forgets it.
  // Call without the GIL.
  void interrupt(int64_t handle, const std::string& exception);
  // For a done CUDA handle: `consumer` (a cudaStream_t; the handle's own
  // stream when `use_own`), and the stream the tensor was submitted on, wait
  // for the operation's done event (Note [Completion on the consumer's
  // stream]). Thread-safe; nothing for host operations.
  void orderAfter(const Handle& handle, void* consumer, bool use_own);

  // Call sites for the life of the process (Note [Call sites]).
  core::CallSiteTable& callSites() { return call_sites_; }
  // Whether bindings capture call sites (HVDLITE_CALL_SITES of the last init()).
  bool callSitesEnabled() const { return call_sites_enabled_.load(std::memory_order_relaxed); }

  // Note [Failures by message]
  // A failure that reaches Python through a framework (a TF op's status, a
  // JAX custom call's error) keeps only its kind's code and message. So the
  // C API remembers the last failures that carried details, and the
  // binding that re-raises one as hvdlite's exception (TF eagerly, JAX)
  // looks its kind and details up by the message. Thread-safe.
  void rememberFailure(const core::Status& failure);
  // The remembered failure with this message; a Status without details if none.
  core::Status failureNamed(const std::string& message) const;

 private:
  std::shared_ptr<Handle> find(int64_t handle) const;
  static transport::BufferAllocator bufferAllocator(std::shared_ptr<const DeviceAllocator> allocator);
  void reportLongWait(Handle& handle, core::Runtime& runtime);

  mutable std::mutex runtime_mutex_;  // guards runtime_ (init/shutdown vs. framework threads)
  std::shared_ptr<core::Runtime> runtime_;
  int init_count_ = 0;
  mutable std::mutex allocator_mutex_;
  std::shared_ptr<const DeviceAllocator> device_allocator_;
  mutable std::mutex handles_mutex_;
  std::map<int64_t, std::shared_ptr<Handle>> handles_;
  int64_t next_handle_ = 1;
  core::CallSiteTable call_sites_;
  std::atomic<bool> call_sites_enabled_{true};
  mutable std::mutex failures_mutex_;
  std::deque<core::Status> failures_;  // the latest last
};

// The process-wide Session, created on first use.
Session& session();

}  // namespace hvdlite::api
