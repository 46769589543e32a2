#include "api/session.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "api/caller_output.h"
#include "api/request.h"
#include "common/errors.h"
#include "common/logging.h"
#include "transport/store.h"

namespace hvdlite::api {

namespace {

// `stream` (of GPU `device`) waits for a batch's done `event`, once per
// stream and batch on this thread: consecutive results of one fused batch
// share its event, so one wait per stream does (200 gradients read on one
// stream: one cudaStreamWaitEvent, not 200). The thread remembers the last
// event and the last two streams it ordered after it; a recycled event is a
// new control block, never a match.
void waitOncePerBatch(core::Runtime& runtime, int device, void* stream, const core::DeviceMemory& event) {
  thread_local std::weak_ptr<void> last_event;
  thread_local void* last_streams[2] = {nullptr, nullptr};
  thread_local int next_slot = 0;
  const bool same_event = !last_event.expired() && !last_event.owner_before(event) && !event.owner_before(last_event);
  if (!same_event) {
    last_event = event;
    last_streams[0] = last_streams[1] = nullptr;
    next_slot = 0;
  } else if (stream == last_streams[0] || stream == last_streams[1]) {
    return;
  }
  runtime.waitOnDevice(device, stream, event);
  last_streams[next_slot] = stream;
  next_slot ^= 1;
}

}  // namespace

// Note [The runtime without a lock on the caller's path]
// Every collective enters through submit() and most wait() for it, and each
// used to copy the runtime's shared_ptr under runtime_mutex_: two lock and
// unlock pairs and four reference counts on a small synchronous collective's
// path (~300 instructions of a 4-byte allreduce_, callgrind). They take a
// RuntimeUse instead: it counts itself in users_, then reads current_ (the
// runtime's plain pointer), and uncounts itself when it goes: two atomic
// increments, no lock. shutdown() clears current_ first, shuts the runtime
// down (which completes every entry, so every waiter's handle is done), and
// only then waits until users_ is zero before it drops its reference: a user
// that read the old pointer counted itself before reading it (both
// sequentially consistent), so shutdown() sees it counted and waits for it,
// and one that counted itself later reads nullptr, as it would have read no
// runtime_ before. So a runtime is never destroyed under a thread using it,
// as the shared_ptr copies guaranteed, and elastic resets (shutdown, then
// init of a new runtime) see the same order of events. A thread still in
// wait() after kUsersDrainTimeout (none can be: its entry completed at the
// shutdown and a wait returns within its slice) would keep shutdown() from
// returning, so the runtime is then kept in retired_ for the life of the
// session instead of destroyed. The other uses of the runtime (runtime(),
// orderAfter, interrupt, setDeviceAllocator) are off the hot path and keep
// their shared_ptr copies, which keep the runtime alive as before.
class Session::RuntimeUse {
 public:
  explicit RuntimeUse(const Session& session) : users_(session.users_) {
    users_.fetch_add(1);
    runtime_ = session.current_.load();
  }
  ~RuntimeUse() { users_.fetch_sub(1); }
  RuntimeUse(const RuntimeUse&) = delete;
  RuntimeUse& operator=(const RuntimeUse&) = delete;

  core::Runtime* get() const { return runtime_; }
  // As Session::runtime(): InvalidArgument if not initialized.
  core::Runtime& required() const {
    if (!runtime_) throw InvalidArgument("hvdlite has not been initialized; call hvdlite.init() first");
    return *runtime_;
  }

 private:
  std::atomic<int>& users_;
  core::Runtime* runtime_;
};

Session& session() {
  // hvdlite.common.basics registers an atexit shutdown, so by the time this
  // static is destroyed its runtime is already gone.
  static Session instance;
  return instance;
}

void Session::init(const std::map<std::string, std::string>& env,
                   const std::vector<std::vector<int>>& process_sets, int64_t mpi_comm) {
  if (initialized()) return;  // Horovod's init() is idempotent
  auto config = core::Config::fromEnvironment(env);
  config.mpi_comm = mpi_comm;
  call_sites_enabled_ = config.call_sites;
  std::unique_ptr<transport::Store> store;
  if (!config.store_addr.empty()) {
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.start_timeout_s * 1000));
    store = transport::connectTcpStore(config.store_addr, config.store_port, config.secret, timeout);
  }
  int round = config.rendezvous_round >= 0 ? config.rendezvous_round : init_count_;
  auto runtime = std::make_shared<core::Runtime>(config, round, process_sets, std::move(store));
  ++init_count_;
  {
    std::lock_guard<std::mutex> lock(allocator_mutex_);
    if (device_allocator_) runtime->setDeviceBufferAllocator(bufferAllocator(device_allocator_));
  }
  std::lock_guard<std::mutex> lock(runtime_mutex_);
  runtime_ = std::move(runtime);
  current_.store(runtime_.get());
}

void Session::shutdown() {
  std::shared_ptr<core::Runtime> runtime;
  {
    std::lock_guard<std::mutex> lock(runtime_mutex_);
    current_.store(nullptr);
    runtime = std::move(runtime_);
    runtime_.reset();
  }
  if (!runtime) return;
  // Completes every pending entry (with an error); their handles, held by
  // their submitters, still report why to a later synchronize().
  runtime->shutdown();
  // Note [The runtime without a lock on the caller's path].
  const auto deadline = std::chrono::steady_clock::now() + kUsersDrainTimeout;
  while (users_.load() != 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      logWarning(runtime->config().rank,
                 "shutdown: a thread still used the runtime after its shutdown; it is kept, not destroyed");
      std::lock_guard<std::mutex> lock(runtime_mutex_);
      retired_.push_back(std::move(runtime));
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

bool Session::initialized() const { return current_.load() != nullptr; }

std::shared_ptr<core::Runtime> Session::runtime() const {
  std::lock_guard<std::mutex> lock(runtime_mutex_);
  if (!runtime_) {
    throw InvalidArgument("hvdlite has not been initialized; call hvdlite.init() first");
  }
  return runtime_;
}

void Session::submit(const hvdlite_request& request, Completion completion, const core::CallSite* call_site) {
  auto entry = buildEntry(request, &call_sites_);
  if (call_site) entry->call_site = call_site;
  const RuntimeUse use(*this);
  core::Runtime* runtime = &use.required();  // throws when not initialized, before anything is attached
  Handle* attached = completion.handle.get();
  if (attached) {
    attachHandle(*entry, std::move(completion.handle), *runtime);
  } else {
    if (!completion.callback) {
      throw InvalidArgument(detail::concat(opTypeName(entry->op), " of '", entry->name,
                                           "': submitted with neither a handle nor a callback (a binding bug)"));
    }
    entry->callback = entry->device >= 0 ? orderedOnStream(std::move(completion.callback), *runtime)
                                         : std::move(completion.callback);
    entry->allocate = entry->device >= 0 && (request.flags & HVDLITE_REQUEST_OUTPUT_ON_STREAM) && completion.allocate
                          ? allocatedOnStream(std::move(completion.allocate), *entry, *runtime)
                          : std::move(completion.allocate);
  }
  try {
    if (writesIntoCallerBuffer(*entry)) intoCallerBuffer(*entry, *runtime);
    if (solo_.active()) {
      solo_.complete(*entry, *runtime);  // never queued (Note [Solo collectives] in api/solo.h)
      return;
    }
    runtime->enqueue(std::move(entry), !(request.flags & HVDLITE_REQUEST_NO_WAKE));
  } catch (...) {
    if (attached) detachHandle(*attached);
    throw;
  }
}

void Session::detachHandle(Handle& handle) {
  std::shared_ptr<Handle> self;  // released after the lock: it may be the last reference
  std::lock_guard<std::mutex> lock(handle.mutex);
  if (!handle.done) self = std::move(handle.held_by_entry);
}

// Note [Ordered before done]
// A binding that completes through a callback (api.h's done: the TF GPU
// kernels, JAX's CUDA handler) hands the framework its result as soon as done
// returns: TensorFlow runs the next kernel on its stream, XLA queues the rest
// of the step. The batch is then only queued on the GPU, not finished, so the
// request's stream (the one that reads the result) must wait for the batch's
// done event first, which this does on the thread of the cycle, before the
// binding's callback runs. One wait per stream and batch (a fused batch's
// members share one event; Note [One wait per stream] in
// core/device_executor.cc). A failed entry's stream waits too where the
// batch ran, so that memory the framework frees after done is not reused
// while NCCL may still touch it. Safe to keep `runtime` by reference: the
// runtime completes (and drops) every entry before it goes.
core::Callback Session::orderedOnStream(core::Callback callback, core::Runtime& runtime) {
  return [callback = std::move(callback), rt = &runtime](core::TensorEntry& e, const core::Status& status) {
    if (e.done_event) {
      try {
        waitOncePerBatch(*rt, e.device, e.stream, e.done_event);
      } catch (const std::exception& error) {
        // The result cannot be ordered: fail the operation rather than let
        // the framework read it early.
        callback(e, core::Status::Error(core::StatusKind::kTransport,
                                        detail::concat(opTypeName(e.op), " of '", e.name, "': ", error.what())));
        return;
      }
    }
    callback(e, status);
  };
}

// Note [Outputs allocated late]
// An output sized by negotiation (allgather, alltoall) is allocated on the
// thread of the cycle, a reducescatter's at enqueue, both after the ready
// point the core recorded on the request's stream. TensorFlow's allocator
// hands out a block as soon as the host is done with the tensor that held
// it, in the order of TF's stream alone: kernels queued there before the
// allocation may still read or write it. So for a request that says so
// (HVDLITE_REQUEST_OUTPUT_ON_STREAM), the core records an event on the
// request's stream right after the allocation and its own stream waits for
// it before writing the output: ordered on the GPU, as Horovod's TF ops
// order it, and the host never waits. It costs overlap only there: the
// collective waits for what the framework queued before the allocation.
// (PyTorch's outputs need none of this: hvdlite.torch allocates them under
// the NCCL stream itself, Note [Outputs from the framework's allocator] in
// session.h; XLA's buffers are the custom call's own, allocated before it.)
core::OutputAllocator Session::allocatedOnStream(core::OutputAllocator allocate, const core::TensorEntry& entry,
                                                 core::Runtime& runtime) {
  return [allocate = std::move(allocate), device = entry.device, stream = entry.stream,
          what = std::string(opTypeName(entry.op)) + " of '" + entry.name + "'",
          rt = &runtime](const std::vector<int64_t>& shape) -> void* {
    void* memory = allocate(shape);
    if (memory) rt->orderDeviceWorkAfter(device, stream, what);
    return memory;
  };
}

// Note [Completing a handle]
// Every tensor's completion runs the callback below on the thread of the
// cycle, and most complete with an ok status, no output shape, no splits and
// no CUDA event: exactly a new handle's fields. So it copies only what
// differs from them (a Handle is completed once, and the bindings make a new
// one per operation), and wakes the done_cv only when a thread sleeps on it:
// a waiter polls isDone() first (Session::wait) and counts itself in
// `sleepers`, under the handle's mutex, before it sleeps; the callback sets
// done under the same mutex, so a sleeper either sees done before sleeping
// or is counted when the callback looks. The callback went from 250 to 116
// instructions a tensor (200 x 16 KiB step, rank 0 of 2, callgrind).
//
// Note [The callback's reference]
// The entry's callback must keep its handle alive until it runs, but a
// std::function stores a capture on the heap unless it is trivially
// copyable (libstdc++), and a shared_ptr is not: one allocation a tensor on
// the submitting thread, freed on the thread of the cycle (the cross-thread
// free Note [Entries kept for reuse] in core/entry_pool.cc describes). So the
// handle holds itself (held_by_entry) from attachHandle until its callback
// runs, and the callback captures a plain pointer and drops that reference
// once it has completed the handle. Every queued entry is completed, with an
// error at the latest by the runtime's shutdown; an entry refused before it
// was queued (every throw of Runtime::enqueue comes before the queue takes
// the entry) has its reference dropped by submit (detachHandle).
//
// The handle learns the outcome from the entry's callback, and owns the
// outputs the core allocates for it.
void Session::attachHandle(core::TensorEntry& entry, std::shared_ptr<Handle> handle, core::Runtime& runtime) {
  handle->op = entry.op;
  if (handle->name != entry.name) handle->name = entry.name;  // a reused handle may hold it already
  handle->device = entry.device;
  handle->stream = entry.stream;
  Handle* h = handle.get();
  h->held_by_entry = handle;
  // Only what differs from a new handle's fields is copied, and only a waiter
  // is woken (Note [Completing a handle]).
  entry.callback = [h](core::TensorEntry& e, const core::Status& status) {
    // Declared first, so released after the lock: it may be the last reference.
    std::shared_ptr<Handle> self;
    std::lock_guard<std::mutex> lock(h->mutex);
    self = std::move(h->held_by_entry);
    if (!status.ok()) h->status = status;
    if (!e.output_shape.empty()) h->output_shape = e.output_shape;
    if (!e.received_splits.empty()) h->received_splits = e.received_splits;
    h->value = e.result_value;
    if (e.done_event) h->done_event = e.done_event;
    h->done = true;
    if (h->sleepers > 0) h->done_cv.notify_all();
  };
  // Only these sizes are known after negotiation; the others write into the
  // caller's buffers (and a small allreduce saves the allocator's heap copy).
  if (entry.op != OpType::kAllgather && entry.op != OpType::kAlltoall && entry.op != OpType::kReducescatter) return;
  size_t esize = dtypeSize(entry.dtype);
  std::shared_ptr<const DeviceAllocator> allocator;
  if (entry.device >= 0) {
    std::lock_guard<std::mutex> lock(allocator_mutex_);
    allocator = device_allocator_;
  }
  entry.allocate = [handle, esize, device = entry.device, stream = entry.stream, allocator,
                    rt = &runtime](const std::vector<int64_t>& shape) -> void* {
    size_t n = esize;
    for (auto d : shape) n *= static_cast<size_t>(d);
    if (device >= 0) {
      // Safe: the runtime completes (and drops) every entry before it goes.
      handle->device_output = allocator ? (*allocator)({device, n, stream, rt->deviceStream(device)})
                                        : rt->allocateDevice(device, n);
      handle->device = device;
      return handle->device_output.get();
    }
    // The allocation is handed to NumPy later; it is written before it is
    // read, so it is left uninitialised (a zero fill would be one more pass).
    handle->output.reset(new uint8_t[std::max<size_t>(n, 1)]);
    return handle->output.get();
  };
}

// Fusion buffers through the binding's allocator: they are used on the NCCL
// stream alone, so it is both the entry's stream and the writer's.
transport::BufferAllocator Session::bufferAllocator(std::shared_ptr<const DeviceAllocator> allocator) {
  if (!allocator) return {};
  return [allocator](int device, size_t bytes, void* stream) {
    return (*allocator)({device, bytes, stream, stream});
  };
}

void Session::setDeviceAllocator(DeviceAllocator allocator) {
  std::shared_ptr<const DeviceAllocator> shared =
      allocator ? std::make_shared<const DeviceAllocator>(std::move(allocator)) : nullptr;
  {
    std::lock_guard<std::mutex> lock(allocator_mutex_);
    device_allocator_ = shared;
  }
  std::shared_ptr<core::Runtime> runtime;
  {
    std::lock_guard<std::mutex> lock(runtime_mutex_);
    runtime = runtime_;
  }
  if (runtime) runtime->setDeviceBufferAllocator(bufferAllocator(shared));
}

void Session::orderAfter(const Handle& handle, void* consumer, bool use_own) {
  if (!handle.done_event || handle.device < 0) return;
  std::shared_ptr<core::Runtime> runtime;
  {
    std::lock_guard<std::mutex> lock(runtime_mutex_);
    runtime = runtime_;
  }
  // After a clean shutdown every batch has finished (the device
  // communicators drained before closing): nothing to wait for.
  if (!runtime) return;
  void* first = use_own ? handle.stream : consumer;
  waitOncePerBatch(*runtime, handle.device, first, handle.done_event);
  if (handle.stream != first) waitOncePerBatch(*runtime, handle.device, handle.stream, handle.done_event);
}

bool Handle::isDone() { return done.load(std::memory_order_acquire); }

void Handle::resetForReuse() {
  // The mutex and condition variable are unlocked and unwaited: reused as they are.
  done.store(false, std::memory_order_relaxed);
  sleepers = 0;
  held_by_entry.reset();
  if (!status.ok()) status = core::Status();
  output.reset();
  device_output.reset();
  device = -1;
  done_event.reset();
  stream = nullptr;
  output_shape.clear();
  received_splits.clear();
  value = -1;
  op = OpType::kAllreduce;
  name.clear();
  wait_started = {};
  next_report = {};
  taken = false;
}

namespace {

// "allreduce of 'w'", or "join()" (whose entry's name is internal).
std::string describe(const Handle& handle) {
  if (handle.op == OpType::kJoin) return "join()";
  return detail::concat(opTypeName(handle.op), " of '", handle.name, "'");
}

// A done handle's outputs become the waiting caller's, once. Under its mutex.
void claim(Handle& handle) {
  if (handle.taken) {
    throw InvalidArgument(describe(handle) + ": its handle was already synchronized; wait for it once");
  }
  handle.taken = true;
}

}  // namespace

bool Session::wait(Handle& handle, std::chrono::steady_clock::duration slice) {
  // Run the cycles here while no other thread does (Note [Cycles on the
  // waiting thread] in core/runtime_cycles.cc); while the background thread runs
  // one, look a while, yielding the core between looks, before sleeping
  // (small collectives finish within microseconds, and a woken thread can
  // wait a scheduler tick for its core: Note [Polling after activity] in
  // core/tensor_queue.cc).
  // One clock reading per pass, none once done (Note [One clock reading a
  // cycle] in core/runtime_cycles.cc).
  // Done already (most handles of a step by the time they are waited for):
  // no runtime, no clock.
  if (handle.isDone()) {
    std::lock_guard<std::mutex> lock(handle.mutex);
    claim(handle);
    return true;
  }
  const RuntimeUse use(*this);  // Note [The runtime without a lock on the caller's path]
  core::Runtime* const runtime = use.get();
  bool drove = false;
  auto now = std::chrono::steady_clock::now();
  if (handle.wait_started == std::chrono::steady_clock::time_point{}) handle.wait_started = now;
  const auto deadline = slice == std::chrono::steady_clock::duration::max() ? std::chrono::steady_clock::time_point::max()
                                                                           : now + slice;
  const auto poll_until = now + std::chrono::microseconds(200);
  while (!handle.isDone()) {
    if (runtime && runtime->runCycleOnCaller(now)) {
      drove = true;
    } else if (now < poll_until) {
      sched_yield();
    } else {
      break;
    }
    if (handle.isDone()) break;
    now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
  }
  if (drove) runtime->releaseCycles();
  {
    std::unique_lock<std::mutex> lock(handle.mutex);
    if (!handle.done) {
      // Blocked from here (Note [Divergence] in core/coordinator.cc); the
      // polling above counts as running, not as blocked.
      if (runtime) runtime->beginWait();
      ++handle.sleepers;
      bool done = handle.done_cv.wait_until(lock, deadline, [&] { return handle.done.load(); });
      --handle.sleepers;
      if (runtime) runtime->endWait();
      if (!done) {
        lock.unlock();
        if (runtime) reportLongWait(handle, *runtime);
        return false;
      }
    }
    claim(handle);
  }
  return true;
}

// Note [Stalled synchronize]
// The coordinator reports tensors that some rank has not submitted, and the
// transports report a peer that does not take part in a transfer; a thread
// blocked in synchronize(), join() or barrier() can still wait on something
// neither sees (a collective inside MPI, which cannot be timed out; a CUDA
// event that never fires). So a wait itself is reported on this rank once
// per stall check time, naming the operation and how long it has waited;
// the reports around it say who is missing.
void Session::reportLongWait(Handle& handle, core::Runtime& runtime) {
  const double check = runtime.config().stall_warning_s;
  if (check <= 0) return;
  auto now = std::chrono::steady_clock::now();
  auto every = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(check));
  if (handle.next_report == std::chrono::steady_clock::time_point{}) {
    handle.next_report = handle.wait_started + every;
  }
  if (now < handle.next_report) return;
  handle.next_report = now + every;
  auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - handle.wait_started).count();
  logWarning(runtime.config().rank,
             detail::concat("stall: waited ", waited, " s for ", describe(handle),
                            " to complete (synchronize(), join() or barrier()); ",
                            "the stall reports say which ranks are missing "
                            "(HVDLITE_STALL_CHECK_TIME_SECONDS)"));
}

void Session::rememberFailure(const core::Status& failure) {
  // Enough for the failures of one step's collectives to be looked up.
  constexpr size_t kRemembered = 256;
  if (failure.ok()) return;
  core::Status remembered = failure;
  // Found means remembered: a failure without fields gets empty ones.
  if (!remembered.details) remembered.details = std::make_shared<core::ErrorDetails>();
  std::lock_guard<std::mutex> lock(failures_mutex_);
  failures_.push_back(std::move(remembered));
  if (failures_.size() > kRemembered) failures_.pop_front();
}

core::Status Session::failureNamed(const std::string& text) const {
  std::lock_guard<std::mutex> lock(failures_mutex_);
  for (auto it = failures_.rbegin(); it != failures_.rend(); ++it) {
    if (!it->message.empty() && text.find(it->message) != std::string::npos) return *it;
  }
  return core::Status::Error(core::StatusKind::kCollective, text);
}

void Session::interrupt(Handle& handle, const std::string& exception) {
  std::shared_ptr<core::Runtime> runtime;
  {
    std::lock_guard<std::mutex> lock(runtime_mutex_);
    runtime = runtime_;
  }
  if (runtime) {
    int rank = runtime->config().rank;
    runtime->abort(detail::concat(
        "rank ", rank, " was interrupted by ", exception, " while it waited for ", describe(handle),
        " (Ctrl-C, or a signal handler such as a timeout's, raised it), so collectives stopped "
        "on every rank; see rank ", rank, "'s traceback"));
  }
  // Aborted, the thread running cycles fails the entry within milliseconds;
  // until then the core may still write into the caller's buffers, which the
  // caller releases once the exception unwinds. Bounded: an interrupt must
  // not turn into a hang.
  {
    std::unique_lock<std::mutex> lock(handle.mutex);
    ++handle.sleepers;
    handle.done_cv.wait_for(lock, std::chrono::seconds(2), [&] { return handle.done.load(); });
    --handle.sleepers;
  }
}

}  // namespace hvdlite::api
