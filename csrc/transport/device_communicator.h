// Collectives on accelerator (CUDA) memory, behind the same Communicator
// interface as the CPU transports, plus what device memory needs besides:
// stream ordering, device buffers and host round trips. Implementations:
// cuda/ (what every CUDA communicator shares, and the host-staged one) and nccl/.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/communicator.h"

namespace hvdlite::transport {

// Note [Device ordering]
// Device work is ordered with CUDA events, never by blocking the host: before
// reading a tensor the communicator's stream waits for the framework's ready
// event (Note [Ready at enqueue]); after the collective it records a done
// event, which the consumer's stream waits on when the result is asked for
// (Note [Completion on the consumer's stream]). So the Communicator methods
// below take DEVICE pointers and return once the work is queued on the
// communicator's stream, in call order; the background thread waits for the
// GPU only in stageToHost(), and there by polling an event that an abort or
// the timeout ends (Note [Failing, not hanging]). There is one such stream
// per GPU, shared by the GPU's communicators.
//
// Note [Ready at enqueue]
// The point NCCL waits for must be where the tensor was when the framework
// enqueued it. Backward goes on queueing later layers' kernels on the same
// stream; an event recorded there by the background thread after negotiation
// would make layer N's allreduce wait for the rest of backward (no overlap),
// and a later kernel that reuses the memory would change what it reads. So
// when a binding gives a stream and no ready event, the runtime records one
// on that stream in enqueue(), on the caller's thread
// (DeviceTransport::recordReady), from a pool, and the entry holds it until
// it completes. This costs one cudaEventRecord per CUDA tensor; the waits
// stay one per producer stream and batch (Note [One wait per stream] in
// core/device_executor.cc).
//
// Note [Completion on the consumer's stream]
// Nothing is queued into a framework's stream after enqueue: a wait inserted
// there when the background thread runs a batch would land in the middle of
// backward, and every backward kernel queued after it would wait for that
// allreduce. Instead each batch records one done event, every entry of the
// batch holds it, and synchronize() (Session::wait) makes the stream that
// reads the result wait for it: the caller's CURRENT stream, which may be
// another than the one the tensor came from, and the stream the tensor was
// submitted on, so that memory the framework frees afterwards is reused in
// that stream's order only after the collective is done with it. A result is
// then right on whichever stream reads it, and backward never waits for an
// allreduce it did not ask for.
// The message methods (gather, broadcastMessage) and barrier() go through the
// process set's CPU communicator.
//
// Note [Failing, not hanging]
// A GPU waiting in an NCCL kernel for a peer that died, failed or never gets
// there spins forever, and so does every framework stream waiting on it. So
// the runtime's watchdog thread polls health() (NCCL's asynchronous errors, and
// the age of the oldest unfinished batch against HVDLITE_NCCL_TIMEOUT_SECONDS),
// and any fatal error anywhere (that, or a peer lost on the control plane)
// calls abort() on every device communicator: ncclCommAbort stops this rank's
// kernels, so its streams drain and nothing waits forever. No lock is held
// across an NCCL call, so abort() is never kept waiting by a call blocked on
// a peer. Communicators are created non-blocking with a deadline for the same
// reason. A clean shutdown is decided alike on every rank of the set
// (close()): if every rank's GPU work finished, ncclCommFinalize, a poll, then
// ncclCommDestroy; otherwise ncclCommAbort on every rank.

// The calling thread's CUDA state that device work changes: its current
// device and its stream-capture mode (Note [Threads and stream capture] in
// cuda/cuda_runtime.h). -1: unknown, leave as it is.
struct ThreadCudaState {
  int device = -1;
  int capture_mode = -1;
};

// A device-to-device copy of a batch (DeviceCommunicator::copyMany).
struct DeviceCopy {
  void* dst;
  const void* src;
  size_t bytes;
};

// Device memory handed to or from a framework, freed by its deleter (the
// framework's allocator, or cudaFree/cudaFreeAsync) when the last reference goes.
using DeviceMemory = std::shared_ptr<void>;
// A cudaEvent_t (get()) lent from a pool, back there when the last reference goes.
using DeviceEvent = std::shared_ptr<void>;

class DeviceCommunicator : public Communicator {
 public:
  // Binds to CUDA device `device`, makes it the calling thread's current
  // device and puts the thread in thread-local capture mode; the first call
  // (collective: every member of the set makes it at the same response)
  // creates the communicator's resources (NCCL: its communicator). A later
  // different device throws: one GPU per rank.
  virtual void useDevice(int device) = 0;
  virtual int device() const = 0;  // -1 before useDevice()
  // The calling thread's CUDA state, and setting it back, for a cycle that
  // runs on a framework thread (whose state must not change).
  virtual ThreadCudaState saveThread() = 0;
  virtual void restoreThread(const ThreadCudaState& state) = 0;

  // Later work waits for `ready_event` (a cudaEvent_t) or, when it is null,
  // for everything queued so far on `stream` (a cudaStream_t; null = default).
  virtual void waitFor(void* ready_event, void* stream) = 0;
  // Marks the end of the work queued so far (`what` names it for the
  // watchdog's messages) and returns an event of that point, which the
  // batch's consumers wait on (Note [Completion on the consumer's stream]).
  virtual DeviceEvent recordDone(const std::string& what) = 0;

  // A device buffer of at least `bytes` kept between calls (fusion buffer),
  // from the framework's allocator where one is registered; `slot` 0 and 1
  // are independent buffers. Null, with `failure` saying why, when the GPU is
  // out of memory (Note [Allocation failures] in core/device_executor.cc);
  // other failures throw.
  virtual void* reserve(size_t bytes, int slot, std::string& failure) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // device to device
  // Copies that neither overlap one another nor depend on each other, in one
  // call where the CUDA runtime batches copies (cudaMemcpyBatchAsync, CUDA >=
  // 12.8), else one call each.
  virtual void copyMany(const std::vector<DeviceCopy>& copies);
  // Host round trips for what NCCL cannot do in its reduction. stageToHost
  // returns host memory holding the bytes (valid until the next staging
  // call), once they have arrived; copyFromHost queues the copy back (`host`
  // may be that staging memory, and is free to reuse when it returns).
  virtual void* stageToHost(const void* device, size_t bytes) = 0;
  virtual void copyFromHost(void* device, const void* host, size_t bytes) = 0;

  // The lowest set rank that passed ok = false, or size() when none did:
  // every rank learns whether each one could go on (over the CPU transport).
  virtual int firstFailedRank(bool ok) = 0;

  // Thread-safe (the watchdog calls them). health(): empty while all is
  // well, else what failed (Note [Failing, not hanging]). abort(): stops
  // this rank's device work now; every later call throws.
  virtual std::string health(double timeout_seconds) { return {}; }
  virtual void abort() {}
  // Clean shutdown, collective over the set's members (called by each, at
  // the same point): releases the device resources the way every member
  // agrees on (Note [Failing, not hanging]). The communicator is unusable
  // afterwards.
  virtual void close() {}

  // Sum of factor * x over the ranks, in one NCCL call (floating types only).
  // Checked like the collectives (Note [Checked entry points]).
  void allreduceScaled(void* data, size_t count, DataType dtype, double factor);
  void reducescatterScaled(const void* in, void* out, const std::vector<size_t>& counts,
                           DataType dtype, double factor);

  // An allreduce whose result needs host arithmetic NCCL cannot do (Note
  // [Scaling on the device] in core/device_executor.cc): finish(host, n)
  // runs on n reduced elements in host memory, every element once, before
  // they go back to the device. Checked like allreduce().
  using HostFinish = std::function<void(void* host, size_t count)>;
  void allreduceFinishingOnHost(void* data, size_t count, DataType dtype, ReduceOp op, const HostFinish& finish);

  // How many elements the buffer of an allreduce of `count` (allreduce(),
  // allreduceScaled(), allreduceFinishingOnHost()) must have room for: more
  // where the communicator splits it into equal parts (two levels); those
  // past `count` are its scratch.
  virtual size_t allreduceRoom(size_t count) const { return count; }

 protected:
  virtual void doAllreduceScaled(void* data, size_t count, DataType dtype, double factor) = 0;
  virtual void doReducescatterScaled(const void* in, void* out, const std::vector<size_t>& counts,
                                     DataType dtype, double factor) = 0;
  // This default stages the whole result once after doAllreduce(); two
  // levels finish their shard while it is on the host anyway.
  virtual void doAllreduceFinishingOnHost(void* data, size_t count, DataType dtype, ReduceOp op,
                                          const HostFinish& finish);

 private:
  void checkScaled(const char* call, DataType dtype) const;
};

// Device memory for work on `stream` (a cudaStream_t) of GPU `device`, from a
// framework's allocator (fusion buffers: Note [Outputs from the framework's
// allocator] in api/session.h). Throws, saying why, when it cannot.
using BufferAllocator = std::function<DeviceMemory(int device, size_t bytes, void* stream)>;

// What the CUDA libraries in use are (hvdliterun --check-build, the info log).
struct GpuLibraryReport {
  std::string operations;     // "nccl" or "host" (HVDLITE_GPU_OPERATIONS)
  std::string cuda_runtime;   // the libcudart file, "" when none loads
  int cuda_runtime_version = 0;
  int cuda_driver_version = 0;
  bool batched_copies = false;  // cudaMemcpyBatchAsync
  std::string nccl;           // the libnccl file, "" when none loads or none is needed
  int nccl_version = 0;
  std::string error;          // why a needed library did not load, "" when all did
};

// Hands out device communicators, one per process set. Loads NCCL and the
// CUDA runtime on first need, not before, so machines without them work.
class DeviceTransport {
 public:
  virtual ~DeviceTransport() = default;
  // Thread-safe. Throws TransportError naming what is missing (and what to
  // install or set) when NCCL or the CUDA runtime cannot be loaded.
  virtual void requireAvailable() = 0;
  // Throws InvalidArgument saying why when allreduce and reducescatter cannot
  // combine `dtype` on the device (NCCL has no 16-bit integers). Loads nothing,
  // so the caller's thread learns it before anything is sent.
  virtual void requireReducible(DataType dtype) const = 0;
  // Thread-safe, after requireAvailable(): how many GPUs this process sees.
  virtual int visibleDevices() = 0;
  // A communicator over `cpu`'s ranks that bootstraps through `cpu` (which
  // must outlive it) on its first useDevice(). Loads nothing.
  virtual std::unique_ptr<DeviceCommunicator> communicator(Communicator& cpu) = 0;
  // Thread-safe. `bytes` (at least 1) of memory on `device`, freed when the
  // last reference goes.
  virtual DeviceMemory allocate(int device, size_t bytes) = 0;
  // Thread-safe, after requireAvailable(); for the framework's thread at
  // enqueue (Note [Ready at enqueue]): an event recorded now on `stream` (a
  // cudaStream_t of GPU `device`; null: that GPU's default stream). Throws
  // InvalidArgument, naming `what`, when the stream is being captured into a
  // CUDA graph. The calling thread's current device is the same afterwards.
  // `what()` is called only for that message: nothing is built per call.
  virtual DeviceEvent recordReady(int device, void* stream, const std::function<std::string()>& what) = 0;
  // Thread-safe; for synchronize() (Note [Completion on the consumer's
  // stream]): later work on `stream` (of GPU `device`; null: its default
  // stream) waits for `event`. Leaves the calling thread's device as it was.
  virtual void waitOn(int device, void* stream, const DeviceEvent& event) = 0;
  // Thread-safe, after requireAvailable(): queues a copy of `bytes` from
  // `src` to `dst`, both on GPU `device`, on `stream` (null: that GPU's
  // default stream), after the work queued there before: a result that is
  // the input itself (Note [Solo collectives] in api/solo.h). Leaves the
  // calling thread's device as it was.
  virtual void copyOnStream(int device, void* stream, void* dst, const void* src, size_t bytes) = 0;
  // The stream NCCL works on for GPU `device` (a cudaStream_t), which writes
  // the outputs; for output allocators (Note [Outputs from the framework's
  // allocator] in api/session.h). Call with `device` current.
  virtual void* stream(int device) = 0;
  // Fusion buffers from the framework's allocator from now on; empty: the
  // core's own (cudaMallocAsync on the NCCL stream).
  virtual void setBufferAllocator(BufferAllocator allocator) = 0;
  // Loads the libraries if not yet loaded; never throws (see `error`).
  virtual GpuLibraryReport report() = 0;
};

struct DeviceTransportOptions {
  std::string nccl_library;    // HVDLITE_NCCL_LIBRARY
  std::string cudart_library;  // HVDLITE_CUDART_LIBRARY
  std::string library_path;    // HVDLITE_GPU_LIBRARY_PATH (':'-separated directories)
  double timeout_seconds = 300;  // HVDLITE_NCCL_TIMEOUT_SECONDS: communicator creation, host waits
  // HVDLITE_GPU_OPERATIONS: "nccl", or "host": CUDA tensors staged through
  // pinned memory and the process set's CPU communicator (no NCCL needed).
  std::string operations = "nccl";
  bool batched_copies = true;  // HVDLITE_BATCHED_COPIES: cudaMemcpyBatchAsync where there is one
};

std::unique_ptr<DeviceTransport> createDeviceTransport(const DeviceTransportOptions& options);

class Transport;

// HVDLITE_HIERARCHICAL_ALLREDUCE=1 for CUDA tensors: a communicator over the
// same ranks as `flat` (sorted `global_ranks`, this rank among them) whose
// allreduce runs in two levels, the device transport's communicator inside
// each host and `cpu`'s across hosts (Note [Hierarchical allreduce] in
// two_level/device_two_level_communicator.cc); its other collectives are
// flat's. Returns `flat` itself where the ranks do not span two or more
// hosts with the same number on each. Creates the host's and the position's
// CPU communicators through `cpu` (collective: every member calls it at the
// same point). `cpu` and `device` must outlive the result.
std::unique_ptr<DeviceCommunicator> hierarchicalDeviceCommunicator(std::unique_ptr<DeviceCommunicator> flat,
                                                                   const std::vector<int>& global_ranks,
                                                                   int my_global_rank, Transport& cpu,
                                                                   DeviceTransport& device);

// NCCL's version if libnccl.so.2 loads with these options, else 0.
int ncclVersion(const DeviceTransportOptions& options);
// "13.0" for 13000; "none" for 0.
std::string cudaVersionText(int version);
// The libraries these options load (in a fresh transport); never throws.
GpuLibraryReport gpuLibraryReport(const DeviceTransportOptions& options);

}  // namespace hvdlite::transport

// DeviceCommunicator's scaled sums, declared once with HVDLITE_COLLECTIVE_HOOKS
// by each device backend (Note [Hook lists] in communicator.h).
#define HVDLITE_SCALED_HOOKS                                                                \
  void doAllreduceScaled(void* data, size_t count, DataType dtype, double factor) override; \
  void doReducescatterScaled(const void* in, void* out, const std::vector<size_t>& counts,  \
                             DataType dtype, double factor) override
