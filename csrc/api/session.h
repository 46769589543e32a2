// The process's one Session: at most one Runtime, and the one way every
// binding's collectives enter it (Note [One way in]). It lives in libhvdlite
// so that every binding loaded into the process (hvdlite._core, the
// TensorFlow op library and JAX's FFI handler through api.h) shares the same
// Runtime.
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

#include "api/api.h"
#include "api/solo.h"
#include "core/call_site.h"
#include "core/runtime.h"

namespace hvdlite::api {

// Completion state of one operation, shared by the core's callback (on the
// thread that runs the cycle) and the Python thread that waits on it. Owned
// by the two of them: the Session keeps no table of handles (Note [One way
// in]).
struct Handle {
  std::mutex mutex;
  std::condition_variable done_cv;
  // Set under `mutex`, after everything below; read without it by isDone(),
  // which a waiting thread asks twice a pass on every small collective.
  std::atomic<bool> done{false};
  // Threads asleep on done_cv, under `mutex` (Note [Completing a handle] in session.cc).
  int sleepers = 0;
  // The handle itself while its entry is queued: the entry's callback holds
  // a plain pointer and releases this (Note [The callback's reference]).
  std::shared_ptr<Handle> held_by_entry;
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
  bool taken = false;  // wait() returned it done: its outputs are handed over

  bool isDone();
  // Back to a new handle's state, member by member, keeping the buffers of
  // its name and shapes (Note [A reused handle for a synchronous collective]
  // in python/bind_collectives.cc). Only for a handle no entry and no other
  // thread holds; a member added above must be reset there too.
  void resetForReuse();
};

// How a submitted operation says it is done: through a Handle, which the
// Session fills (outputs the core allocates included) for a thread that polls
// and waits on it (hvdlite._core), or through the binding's own callback and
// allocator (api.h's done and allocate: the TF kernels, JAX's FFI handler),
// which run on the thread of the cycle. Exactly one of handle and callback.
struct Completion {
  std::shared_ptr<Handle> handle;
  core::Callback callback;
  core::OutputAllocator allocate;  // with callback: outputs sized by negotiation
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

  // Note [One way in]
  // Every collective of every binding enters the core here: hvdlite._core's
  // enqueue (hvdlite.numpy, hvdlite.torch, Keras on torch, JAX outside jit)
  // and the C API's hvdlite_enqueue (the TF kernels, JAX's FFI handler)
  // both hand their api.h request to submit(), which
  //   1. builds the entry through the one checked builder (api/request.h):
  //      codes, counts, pointers, name, scale factors;
  //   2. attaches the completion;
  //   3. queues it in the Runtime, whose validateEntry (core/entry_validation.h)
  //      checks what depends on the running job: process set and membership,
  //      root rank, splits, Adasum's limits.
  // So a bad request is refused in the caller's thread, before anything is
  // queued, with the same words whichever binding sent it (an InvalidArgument;
  // a StatusError once the runtime stopped). Nothing else calls
  // Runtime::enqueue (tests/test_layering.py). The Session keeps no table of
  // operations: a Handle belongs to its submitter (hvdlite/common/handles.py
  // holds hvdlite._core's, the one handle table) and to the entry's callback.
  //
  // `call_site`: where the user's code called, already interned (the Python
  // binding reads it off the caller's frames); null: the request's own
  // call_site_* fields, if any. The request's NO_WAKE flag spares waking the
  // background thread when the caller waits for it next.
  void submit(const hvdlite_request& request, Completion completion,
              const core::CallSite* call_site = nullptr);

  // Blocks until the handle is done or `slice` has passed (call without the
  // GIL): true once done, when its outputs are the caller's (a second wait()
  // on it is refused); false after the slice (call again). Runs the
  // runtime's cycles meanwhile when no other thread does. A wait past the
  // stall check time is reported (Note [Stalled synchronize]).
  bool wait(Handle& handle, std::chrono::steady_clock::duration slice =
                                std::chrono::steady_clock::duration::max());
  // The thread waiting for `handle` gives up: `exception` (e.g.
  // KeyboardInterrupt) was raised in it. Stops collectives here and on every
  // peer with a message naming this rank (Runtime::abort), and waits a
  // bounded time for the core to let go of the handle's buffers. Call
  // without the GIL.
  void interrupt(Handle& handle, const std::string& exception);
  // For a done CUDA handle: `consumer` (a cudaStream_t; the handle's own
  // stream when `use_own`), and the stream the tensor was submitted on, wait
  // for the operation's done event (Note [Completion on the consumer's
  // stream]). Thread-safe; nothing for host operations.
  void orderAfter(const Handle& handle, void* consumer, bool use_own);

  // While solo, every collective completes on this rank alone, or is
  // refused (Note [Solo collectives] in api/solo.h). Process-wide, across
  // init() and shutdown().
  Solo& solo() { return solo_; }

  // Call sites for the life of the process (Note [Call sites]).
  core::CallSiteTable& callSites() { return call_sites_; }
  // Whether bindings capture call sites (HVDLITE_CALL_SITES of the last init()).
  bool callSitesEnabled() const { return call_sites_enabled_.load(std::memory_order_relaxed); }

  // Note [Failures by message]
  // A failure that reaches Python through a framework (a TF op's status, a
  // JAX custom call's error, or a Python exception re-raised by TensorFlow's
  // numpy_function or JAX's io_callback) keeps only its kind's code and its
  // words, which the framework wraps in its own ("Graph execution error:
  // ... [[{{node ...}}]]", "INTERNAL: ..."). So every failure delivered to a
  // framework op or raised into Python is remembered here (the last 256,
  // kind, message and details), and a binding that meets a framework's error
  // asks for the failure whose message that error's text contains: the kind
  // and fields come from this record, never from parsing the words
  // (hvdlite.common.exceptions.carried_failure). A TF Status payload would
  // not survive the host crossings, nor reach Python from an XLA FFI error.
  // Thread-safe.
  void rememberFailure(const core::Status& failure);
  // The latest remembered failure whose message `text` contains, with
  // details (empty ones where the failure had none); a Status without
  // details when none is.
  core::Status failureNamed(const std::string& text) const;

 private:
  void attachHandle(core::TensorEntry& entry, std::shared_ptr<Handle> handle, core::Runtime& runtime);
  // The entry of `handle` was refused before it was queued: its callback
  // will never run, so the handle stops holding itself.
  static void detachHandle(Handle& handle);
  // A callback completion of a CUDA entry: its stream waits for the batch
  // before `callback` runs (Note [Ordered before done] in session.cc).
  static core::Callback orderedOnStream(core::Callback callback, core::Runtime& runtime);
  // HVDLITE_REQUEST_OUTPUT_ON_STREAM: the core's stream waits for the
  // entry's stream after each allocation (Note [Outputs allocated late]).
  static core::OutputAllocator allocatedOnStream(core::OutputAllocator allocate, const core::TensorEntry& entry,
                                                 core::Runtime& runtime);
  static transport::BufferAllocator bufferAllocator(std::shared_ptr<const DeviceAllocator> allocator);
  void reportLongWait(Handle& handle, core::Runtime& runtime);

  // Note [The runtime without a lock on the caller's path] in session.cc:
  // submit() and wait() use the runtime through a RuntimeUse.
  class RuntimeUse;
  // How long shutdown() waits for the last RuntimeUse of the runtime it shut
  // down before it keeps that runtime for good instead (retired_).
  static constexpr std::chrono::seconds kUsersDrainTimeout{10};

  mutable std::mutex runtime_mutex_;  // guards runtime_ (init/shutdown vs. framework threads)
  std::shared_ptr<core::Runtime> runtime_;
  // runtime_'s object, for RuntimeUse: set after runtime_, cleared with it.
  std::atomic<core::Runtime*> current_{nullptr};
  // Threads holding a RuntimeUse (of any runtime).
  mutable std::atomic<int> users_{0};
  // Runtimes shutdown() could not wait out every user of (never, unless a
  // thread stayed in wait() past kUsersDrainTimeout): kept, not destroyed
  // under that thread. Under runtime_mutex_.
  std::vector<std::shared_ptr<core::Runtime>> retired_;
  int init_count_ = 0;
  mutable std::mutex allocator_mutex_;
  std::shared_ptr<const DeviceAllocator> device_allocator_;
  core::CallSiteTable call_sites_;
  std::atomic<bool> call_sites_enabled_{true};
  mutable std::mutex failures_mutex_;
  std::deque<core::Status> failures_;  // the latest last
  Solo solo_;
};

// The process-wide Session, created on first use.
Session& session();

}  // namespace hvdlite::api
