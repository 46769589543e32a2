// The Runtime's life and its entry points: construction (rendezvous, the
// transports, the first process sets, the threads), enqueue and what a CUDA
// entry needs before it is queued, shutdown, and the timeline. The cycle
// loop is in runtime_cycles.cc, process sets and topology in
// runtime_process_sets.cc, failure and the watchdog in runtime_failures.cc.
#include "core/runtime.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>

#include "common/errors.h"
#include "common/logging.h"
#include "core/collective_math.h"
#include "core/entry_validation.h"
#include "core/rank_device.h"

namespace hvdlite::core {
namespace {

std::chrono::duration<double> seconds(double s) { return std::chrono::duration<double>(s); }

// How long shutdown() waits for the other ranks to agree before cutting the
// connections (a peer that is frozen must not hang interpreter exit).
constexpr auto kShutdownGrace = std::chrono::seconds(30);

}  // namespace

Runtime::Runtime(const Config& config, int round, const std::vector<std::vector<int>>& process_sets,
                 std::unique_ptr<transport::Store> store)
    : config_(config),
      key_prefix_(config.job_id + "/r" + std::to_string(round) + "/"),
      store_(std::move(store)),
      timeline_(config.rank),
      executor_(config.fusion_threshold, timeline_, *this) {
  setLogLevel(parseLogLevel(config_.log_level));
  setLogTime(!config_.log_hide_time);
  executor_.setPipelineChunk(config_.pipeline_chunk);
  tuned_ = {config_.fusion_threshold, config_.cycle_time_ms, !config_.autotune};
  if (config_.autotune && config_.rank == 0) {
    AutotuneOptions options;
    options.warmup_samples = config_.autotune_warmup_samples;
    options.steps_per_sample = config_.autotune_steps_per_sample;
    options.samples_per_candidate = config_.autotune_samples_per_candidate;
    autotuner_ = std::make_unique<Autotuner>(tuned_, options, config_.autotune_log);
  }
  if (!store_) {
    HVD_CHECK(config_.size == 1 || !transport::needsStore(config_.transport, config_.controller),
              "a job of ", config_.size, " ranks needs a rendezvous store");
    store_ = std::make_unique<transport::InMemoryStore>();
  }
  transport::TransportOptions options;
  options.rank = config_.rank;
  options.size = config_.size;
  options.secret = config_.secret;
  options.key_prefix = key_prefix_;
  options.bind_address = config_.bind_addr;
  options.hostname = config_.hostname;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(config_.start_timeout_s * 1000));
  options.mpi_comm = config_.mpi_comm;
  options.mpi_library = config_.mpi_library;
  options.mpi_library_path = config_.mpi_library_path;
  options.stall.warn_after = seconds(config_.stall_warning_s);
  options.stall.fail_after = seconds(config_.stall_shutdown_s);
  options.stall.warn = [rank = config_.rank](const std::string& message) { logWarning(rank, message); };
  options.peer_timeout = std::chrono::milliseconds(static_cast<int64_t>(config_.peer_timeout_s * 1000));
  auto hierarchy = [](int flag) {
    return flag < 0    ? transport::Hierarchy::kAuto
           : flag == 0 ? transport::Hierarchy::kOff
                       : transport::Hierarchy::kOn;
  };
  options.hierarchy = hierarchy(config_.hierarchical_allreduce);
  options.allgather_hierarchy = hierarchy(config_.hierarchical_allgather);
  transport_ = transport::createTransport(config_.transport, config_.controller, options, *store_);
  device_transport_ = transport::createDeviceTransport({config_.nccl_library, config_.cudart_library,
                                                        config_.gpu_library_path, config_.nccl_timeout_s,
                                                        config_.gpu_operations, config_.batched_copies});
  computeTopology();
  logStart(round);

  std::vector<int> everyone(config_.size);
  for (int r = 0; r < config_.size; ++r) everyone[r] = r;
  sets_[0] = makeProcessSet(0, everyone);
  global_set_ = sets_[0].get();
  for (const auto& ranks : process_sets) addProcessSet(ranks);

  if (!config_.timeline_path.empty()) startTimeline(config_.timeline_path, config_.timeline_mark_cycles);
  thread_ = std::thread([this] {
    background_id_ = std::this_thread::get_id();
    backgroundLoop();
  });
  watchdog_ = std::thread([this] { watchdogLoop(); });
  // Named so that top -H, py-spy and gdb show which threads are hvdlite's;
  // named here, not by each thread as it starts, so that they carry their
  // names once init returns (a waiting caller may drive the first cycles
  // before the background thread has first run).
  pthread_setname_np(thread_.native_handle(), "hvdlite-bg");
  pthread_setname_np(watchdog_.native_handle(), "hvdlite-watch");
}

Runtime::~Runtime() { shutdown(); }

void Runtime::shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mutex_);
  if (!thread_.joinable()) return;
  shutdown_requested_ = true;
  queue_.wake();
  auto deadline = Clock::now() + kShutdownGrace;
  while (!loop_exited_ && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    queue_.wake();
  }
  if (!loop_exited_) {
    logWarning(config_.rank, "other ranks did not acknowledge shutdown within 30 s; closing connections");
    abortDevices();
    transport_->abort();
  }
  thread_.join();
  {
    std::lock_guard<std::mutex> lock(watchdog_mutex_);
    watchdog_stop_ = true;
  }
  watchdog_wake_.notify_all();
  watchdog_.join();
  timeline_.stop();
  transport_.reset();
}

void Runtime::throwNotRunning(const TensorEntry& entry) {
  Status failure;
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    failure = failure_;
  }
  if (failure.message.empty()) failure = Status::Error(StatusKind::kShutdown, "hvdlite has been shut down");
  // The failure's own type and details: a program that catches, say, a
  // lost peer here reads the same fields as from the collective that failed,
  // with this tensor among its names (the peer may have been lost while no
  // collective was in flight, between two steps: then it is the only one).
  auto details = failure.details ? std::make_shared<ErrorDetails>(*failure.details) : std::make_shared<ErrorDetails>();
  if (std::find(details->tensor_names.begin(), details->tensor_names.end(), entry.name) == details->tensor_names.end()) {
    details->tensor_names.push_back(entry.name);
  }
  throw StatusError(Status::Error(failure.kind,
                                  "cannot start " + std::string(opTypeName(entry.op)) + " of '" + entry.name +
                                      "': " + failure.message +
                                      ". Restart the job, or call shutdown() and init() again (elastic "
                                      "training).",
                                  std::move(details)));
}

void Runtime::enqueue(TensorEntryPtr entry, bool wake_background) {
  if (failed_ || loop_exited_ || shutdown_requested_) throwNotRunning(*entry);
  const ProcessSet* set = global_set_;
  std::shared_ptr<ProcessSet> added;  // keeps an added set alive while the entry is checked against it
  if (entry->process_set_id != 0) {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    auto it = sets_.find(entry->process_set_id);
    if (it != sets_.end()) added = it->second;
    set = added.get();
  }
  validateEntry(*entry, set, config_.rank);
  if (entry->device >= 0) {
    requireDevice(*entry);
    // Tensor collectives read the input: Note [Ready at enqueue].
    if (!entry->ready_event && isTensorCollective(entry->op)) {
      entry->owned_ready_event = device_transport_->recordReady(entry->device, entry->stream, [&entry] {
        return std::string(opTypeName(entry->op)) + " of '" + entry->name + "'";
      });
      entry->ready_event = entry->owned_ready_event.get();
    }
    if (entry->op == OpType::kReducescatter) allocateAtEnqueue(*entry, *set);
    own_device_ = entry->device;
    if (!device_entries_.exchange(true)) {
      std::lock_guard<std::mutex> lock(watchdog_mutex_);
      watchdog_wake_.notify_all();  // Note [Failing, not hanging]: starts watching
    }
  }
  entry->sequence = ++sequence_;
  timeline_.negotiateStart(entry->name, entry->op);
  // Ends a stall's pause (Note [Backing off a stall]; Note [Progress marked
  // without a clock] in runtime_cycles.cc).
  if (!progress_unmarked_.load(std::memory_order_relaxed)) progress_unmarked_.store(true, std::memory_order_relaxed);
  // Refused when the runtime failed or shut down since the check above
  // (Note [No entry after the last drain] in tensor_queue.cc); `entry` is then still ours.
  if (!queue_.add(std::move(entry), config_.rank, wake_background || device_entries_)) throwNotRunning(*entry);
}

// Note [Allocation failures] in device_executor.cc: a CUDA reducescatter's
// output size follows from its input's shape, so it is allocated here, on the
// caller's thread (a framework allocator needs no lock of the background
// thread), and a failure is this call's exception, before anything is sent.
void Runtime::allocateAtEnqueue(TensorEntry& entry, const ProcessSet& set) {
  if (!entry.allocate) {
    throw InvalidArgument(std::string(opTypeName(entry.op)) + " of '" + entry.name +
                          "': a CUDA tensor needs an output allocator (a binding bug)");
  }
  auto shape = reducescatterOutputShape(entry.shape, static_cast<int>(set.ranks.size()), set.rankOf(config_.rank));
  try {
    entry.output = entry.allocate(shape);
  } catch (const std::exception& e) {
    throw CollectiveError(std::string(opTypeName(entry.op)) + " of '" + entry.name + "': allocating its output on GPU " +
                          std::to_string(entry.device) + " (rank " + std::to_string(config_.rank) +
                          ") failed: " + e.what());
  }
  if (!entry.output) {
    throw CollectiveError(std::string(opTypeName(entry.op)) + " of '" + entry.name + "': its output allocator on GPU " +
                          std::to_string(entry.device) + " returned no memory");
  }
}

void Runtime::waitOnDevice(int device, void* stream, const DeviceMemory& event) {
  device_transport_->waitOn(device, stream, event);
}

void Runtime::copyOnDevice(int device, void* stream, void* dst, const void* src, size_t bytes) {
  device_transport_->requireAvailable();
  device_transport_->copyOnStream(device, stream, dst, src, bytes);
}

void Runtime::orderDeviceWorkAfter(int device, void* stream, const std::string& what) {
  DeviceMemory point = device_transport_->recordReady(device, stream, [&what] { return what; });
  device_transport_->waitOn(device, device_transport_->stream(device), point);
}

void Runtime::setDeviceBufferAllocator(transport::BufferAllocator allocator) {
  device_transport_->setBufferAllocator(std::move(allocator));
}

transport::GpuLibraryReport Runtime::gpuLibraries() { return device_transport_->report(); }

DeviceMemory Runtime::allocateDevice(int device, size_t bytes) {
  return device_transport_->allocate(device, bytes);
}

void Runtime::requireDevice(const TensorEntry& entry) {
  if (entry.op == OpType::kAllreduce || entry.op == OpType::kReducescatter) {
    try {
      device_transport_->requireReducible(entry.dtype);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string(opTypeName(entry.op)) + " of '" + entry.name + "': the " +
                            dtypeName(entry.dtype) + " tensor is on GPU " + std::to_string(entry.device) +
                            " (rank " + std::to_string(config_.rank) + "), but " + e.what() +
                            "; reduce it as int32 (e.g. tensor.int()) or on the CPU");
    }
  }
  try {
    device_transport_->requireAvailable();
    if (!gpu_logged_.exchange(true)) logGpuLibraries();
  } catch (const TransportError& e) {
    throw TransportError(std::string(opTypeName(entry.op)) + " of '" + entry.name + "': the tensor is on GPU " +
                         std::to_string(entry.device) + " (rank " + std::to_string(config_.rank) +
                         "), but " + e.what());
  }
  requireOwnGpuPossible(entry);
}

// Note [A GPU per rank] in rank_device.h: only NCCL needs a GPU per rank,
// and HVDLITE_CUDA_DEVICE says the user placed the ranks on purpose.
void Runtime::requireOwnGpuPossible(const TensorEntry& entry) {
  if (own_gpu_possible_.load(std::memory_order_relaxed)) return;  // Note [Cost of a call]
  if (config_.gpu_operations != "nccl" || config_.cuda_device >= 0) return;
  const int visible = device_transport_->visibleDevices();
  if (rankDevice(visible, topology_.local_rank, topology_.local_size) >= 0) {
    own_gpu_possible_ = true;
    return;
  }
  throw InvalidArgument(std::string(opTypeName(entry.op)) + " of '" + entry.name + "' on GPU " +
                        std::to_string(entry.device) + ": " +
                        rankDeviceProblem(visible, config_.rank, topology_.local_rank, topology_.local_size,
                                          config_.cuda_visible_devices));
}

void Runtime::logGpuLibraries() {
  if (!logEnabled(LogLevel::kInfo)) return;
  auto r = device_transport_->report();
  log(LogLevel::kInfo, config_.rank,
      detail::concat("GPU operations: ", r.operations, " (HVDLITE_GPU_OPERATIONS); CUDA runtime ",
                     transport::cudaVersionText(r.cuda_runtime_version), " (", r.cuda_runtime, "), driver supports CUDA ",
                     transport::cudaVersionText(r.cuda_driver_version), ", batched copies ",
                     r.batched_copies ? "yes" : "no",
                     r.nccl.empty() ? std::string() : detail::concat("; NCCL ", r.nccl_version, " (", r.nccl, ")")));
  // Note [A GPU per rank], and the network NCCL will use (docs/gpus.md).
  log(LogLevel::kInfo, config_.rank,
      detail::concat("GPUs: local rank ", topology_.local_rank, " of ", topology_.local_size, " sees ",
                     device_transport_->visibleDevices(), " (CUDA_VISIBLE_DEVICES=",
                     config_.cuda_visible_devices.empty() ? "unset" : config_.cuda_visible_devices,
                     "); NCCL's settings: ",
                     config_.nccl_variables.empty() ? "none set (NCCL chooses its network itself)"
                                                    : config_.nccl_variables));
}

void Runtime::startTimeline(const std::string& path, bool mark_cycles) {
  std::string mine = timelinePathFor(path);
  if (!mine.empty()) timeline_.start(mine, mark_cycles);
}

void Runtime::stopTimeline() { timeline_.stop(); }

// Like Horovod, rank 0 writes the timeline; a path containing "{rank}" gives
// every rank its own file.
std::string Runtime::timelinePathFor(const std::string& path) const {
  auto pos = path.find("{rank}");
  if (pos == std::string::npos) return config_.rank == 0 ? path : std::string();
  std::string out = path;
  out.replace(pos, 6, std::to_string(config_.rank));
  return out;
}

// Note [A rank's own GPU] in device_executor.cc; Note [A GPU per rank].
int Runtime::ownDevice() const {
  int device = own_device_.load();
  if (device >= 0) return device;
  if (config_.cuda_device >= 0) return config_.cuda_device;
  device = rankDevice(device_transport_->visibleDevices(), topology_.local_rank, topology_.local_size);
  return device >= 0 ? device : topology_.local_rank;
}

}  // namespace hvdlite::core
