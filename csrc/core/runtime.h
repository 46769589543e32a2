// The Runtime owns all of hvdlite's state in a process: the rendezvous store
// connection, the transport, the process sets, the tensor queue, the timeline
// and the background thread that negotiates and executes collectives.
// init() creates one; shutdown() destroys it; a later init() makes a new one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/autotuner.h"
#include "core/config.h"
#include "core/executor.h"
#include "core/process_set.h"
#include "core/tensor_queue.h"
#include "core/timeline.h"
#include "transport/device_communicator.h"
#include "transport/store.h"
#include "transport/transport.h"

namespace hvdlite::core {

using transport::DeviceMemory;

struct Topology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int cross_rank = 0, cross_size = 1;
  bool homogeneous = true;
};

class Runtime : private ProcessSetRegistry {
 public:
  // Rendezvous with the other ranks and start the background thread.
  // `round` distinguishes successive inits of one job in the store.
  // `process_sets`: extra sets to create at start (ids 1, 2, ...), identical on every rank.
  Runtime(const Config& config, int round, const std::vector<std::vector<int>>& process_sets,
          std::unique_ptr<transport::Store> store);
  ~Runtime();  // shutdown()
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Coordinated shutdown: tells every rank, fails what is still pending on
  // this rank, joins the thread. Idempotent. Thread-safe.
  void shutdown();

  // Validates and queues an entry (caller's thread). Throws InvalidArgument for
  // bad arguments and TransportError if an earlier failure stopped the runtime.
  // `wake_background`: false when the caller is about to wait for the result
  // and so will run the cycle itself (Note [Cycles on the waiting thread]).
  void enqueue(TensorEntryPtr entry, bool wake_background = true);

  // For a thread waiting for a result: runs one negotiation cycle here if no
  // other thread is running one and this runtime allows it; true if it ran.
  // `now`: the caller's clock reading, used as the cycle's time (Note [One
  // clock reading a cycle] in runtime_cycles.cc).
  bool runCycleOnCaller(Clock::time_point now);
  // A waiting thread got its result: the background thread takes over what
  // is still in flight.
  void releaseCycles();

  // A thread starts or stops waiting for a result (synchronize(), a
  // blocking collective, join(), barrier()): while one waits, this rank
  // counts as blocked (Note [Divergence] in coordinator.cc). Thread-safe.
  void beginWait() { queue_.beginWait(); }
  void endWait() { queue_.endWait(); }

  // Thread-safe: stops collectives here and on every peer with `why` (a
  // waiting thread was interrupted: Note [Aborting from a waiting thread]).
  // Pending entries fail soon after, on the thread running cycles.
  void abort(const std::string& why);

  const Topology& topology() const { return topology_; }
  const Config& config() const { return config_; }

  // Process-set queries (thread-safe). Unknown ids throw InvalidArgument.
  std::vector<int32_t> processSetIds() const;
  std::vector<int> processSetRanks(int32_t id) const;
  // How the set's CPU data moves (Communicator::describe); "" when this rank
  // is not a member.
  std::string processSetTransport(int32_t id) const;

  // Memory on CUDA device `device` for an output whose size negotiation
  // decided (thread-safe). Throws TransportError when NCCL/CUDA cannot load.
  DeviceMemory allocateDevice(int device, size_t bytes);
  // The stream NCCL writes outputs on for `device` (a cudaStream_t), for an
  // output allocator running on the thread of the batch.
  void* deviceStream(int device) { return device_transport_->stream(device); }
  // Thread-safe: later work on `stream` of GPU `device` waits for `event`,
  // an entry's done event (Note [Completion on the consumer's stream]).
  void waitOnDevice(int device, void* stream, const DeviceMemory& event);
  // Thread-safe: the core's stream on GPU `device` waits for what is queued
  // on `stream` now (Note [Outputs allocated late] in api/session.cc);
  // `what` names the operation in errors.
  void orderDeviceWorkAfter(int device, void* stream, const std::string& what);
  // Thread-safe: copies `bytes` from `src` to `dst` on GPU `device`, queued
  // on `stream` after its work (Note [Solo collectives] in api/solo.h).
  void copyOnDevice(int device, void* stream, void* dst, const void* src, size_t bytes);
  // Fusion buffers from a framework's allocator (empty: the core's own).
  void setDeviceBufferAllocator(transport::BufferAllocator allocator);
  // The CUDA libraries this runtime uses (loads them); never throws.
  transport::GpuLibraryReport gpuLibraries();

  // The fusion threshold and cycle time in force (thread-safe); with
  // HVDLITE_AUTOTUNE they change as the search goes on, on every rank alike.
  TunedParameters tunedParameters() const;

  void startTimeline(const std::string& path, bool mark_cycles);
  void stopTimeline();

 private:
  // The private members are defined by responsibility: the cycle loop in
  // runtime_cycles.cc, process sets in runtime_process_sets.cc, failures and
  // the watchdog in runtime_failures.cc, the rest in runtime.cc.

  // runtime_cycles.cc
  void backgroundLoop();
  // One cycle, by whichever thread holds cycle_mutex_; records a failure or
  // an agreed shutdown in stopped_.
  void cycleLocked(Clock::time_point now);
  bool runCycle(Clock::time_point now);  // false once every rank agreed to shut down
  // How long to wait before the next cycle because nothing has completed for
  // a while (Note [Backing off a stall]); zero when not stalled.
  Clock::duration stallPause(Clock::time_point now) const;
  void applyParameters(const TunedParameters& parameters);
  // cycle_sets_ as sets_ stands now (Note [The cycle's process sets]).
  void refreshCycleSets();

  // runtime_process_sets.cc
  void computeTopology();
  void logStart(int round) const;
  std::shared_ptr<ProcessSet> makeProcessSet(int32_t id, std::vector<int> ranks);
  std::string transportReason(const ProcessSet& set) const;
  void logProcessSet(const ProcessSet& set) const;
  int32_t addProcessSet(const std::vector<int>& ranks) override;
  void removeProcessSet(int32_t id) override;
  std::vector<std::shared_ptr<ProcessSet>> memberSets() const;

  // runtime_failures.cc
  // Records `failure` in the store unless another rank did first; returns
  // the first-hand failure every rank reports (its kind and details too).
  Status recordFailure(const Status& failure);
  // What a failed cycle's exception means: a lost peer (with its rank and
  // host as details), a timeout, or another transport failure.
  Status failureOf(const std::exception& error) const;
  void handleFatal(const Status& failure);
  // Note [Failing, not hanging] in transport/device_communicator.h.
  void watchdogLoop();
  std::string checkDevices();
  // Clean release of `set`'s device communicators, collective over its members.
  void closeDevices(ProcessSet& set);
  void abortDevices();
  void failAtShutdown();
  // The caller's error for an entry the runtime no longer takes (it failed
  // or shut down): the failure's kind, details and words.
  [[noreturn]] void throwNotRunning(const TensorEntry& entry);
  // Every entry fails with `failure`'s kind and details; its message is the
  // text after "<op> of '<name>' failed: ".
  void failAll(const Status& failure);
  // `why` per entry, which may add to its copy of `details` (its tensor
  // name and this rank's call site are filled in already).
  void failAll(StatusKind kind, const ErrorDetails& details,
               const std::function<std::string(const TensorEntry&, ErrorDetails&)>& why);

  // runtime.cc
  void allocateAtEnqueue(TensorEntry& entry, const ProcessSet& set);
  void requireDevice(const TensorEntry& entry);
  // Throws InvalidArgument when this host's layout leaves the rank no GPU of its own.
  void requireOwnGpuPossible(const TensorEntry& entry);
  void logGpuLibraries();  // once, when CUDA is first used (info level)
  std::string timelinePathFor(const std::string& path) const;
  int ownDevice() const;

  Config config_;
  std::string key_prefix_;
  Topology topology_;
  std::unique_ptr<transport::Store> store_;
  std::unique_ptr<transport::Transport> transport_;
  // Declared before the process sets, whose device communicators use it.
  std::unique_ptr<transport::DeviceTransport> device_transport_;
  Timeline timeline_;
  TensorQueue queue_;
  Executor executor_;
  std::unique_ptr<Autotuner> autotuner_;  // rank 0 with HVDLITE_AUTOTUNE only
  std::optional<TunedParameters> proposal_;  // rank 0: to broadcast in the next cycle
  mutable std::mutex tuned_mutex_;
  TunedParameters tuned_;  // in force; read by backgroundLoop and tunedParameters()

  mutable std::mutex sets_mutex_;
  std::map<int32_t, std::shared_ptr<ProcessSet>> sets_;
  int32_t next_set_id_ = 1;
  // Bumped under sets_mutex_ whenever sets_ changes (Note [The cycle's process sets]).
  std::atomic<uint64_t> sets_version_{0};
  // sets_[0], which lives as long as the runtime (no request can remove set
  // 0): enqueue() checks most entries against it without sets_mutex_.
  const ProcessSet* global_set_ = nullptr;

  // Held by the thread running a cycle: the background thread, or a framework
  // thread waiting for a result (Note [Cycles on the waiting thread]).
  std::mutex cycle_mutex_;
  // runCycle's copy of sets_, under cycle_mutex_, as of sets_version_ ==
  // cycle_sets_version_ (Note [The cycle's process sets]).
  std::vector<std::shared_ptr<ProcessSet>> cycle_sets_;
  static constexpr uint64_t kNoCycleSets = ~uint64_t{0};
  uint64_t cycle_sets_version_ = kNoCycleSets;
  std::atomic<bool> stopped_{false};      // no more cycles: shutdown agreed, or failed
  std::atomic<Clock::rep> last_cycle_{0};  // when the last cycle started, by any thread
  // When a cycle last started after a submission or a completion, or found
  // nothing in flight (Note [Progress marked without a clock]).
  std::atomic<Clock::rep> last_progress_{Clock::now().time_since_epoch().count()};
  // An entry was submitted, or a cycle completed something, since the last
  // cycle started: no stall pause until that cycle marks the progress.
  std::atomic<bool> progress_unmarked_{false};
  std::atomic<bool> device_entries_{false};  // a CUDA tensor was submitted
  std::atomic<bool> abort_logged_{false};
  std::atomic<bool> gpu_logged_{false};    // abort() said why; handleFatal need not
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> loop_exited_{false};
  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mutex_;
  Status failure_;  // why the runtime stopped, for later enqueues
  ShutdownReport shutdown_report_;  // under failure_mutex_: the agreed shutdown's
  std::mutex shutdown_mutex_;
  std::atomic<std::thread::id> background_id_{};
  std::thread thread_;

  // CUDA: this rank's GPU as its latest CUDA tensor said (-1: none yet), and
  // the enqueue counter (Note [One wait per stream]).
  std::atomic<int> own_device_{-1};
  std::atomic<bool> own_gpu_possible_{false};  // requireOwnGpuPossible() passed once
  std::atomic<uint64_t> sequence_{0};
  // Polls the device communicators' health; stopped after the background thread.
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_wake_;
  bool watchdog_stop_ = false;
  Status watchdog_failure_;  // under failure_mutex_: what the watchdog found
  std::thread watchdog_;
};

}  // namespace hvdlite::core
