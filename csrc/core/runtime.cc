#include "core/runtime.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <set>

#include "common/errors.h"
#include "common/logging.h"
#include "core/collective_math.h"
#include "core/entry_validation.h"

namespace hvdlite::core {
namespace {

std::chrono::duration<double> seconds(double s) { return std::chrono::duration<double>(s); }

// How long shutdown() waits for the other ranks to agree before cutting the
// connections (a peer that is frozen must not hang interpreter exit).
constexpr auto kShutdownGrace = std::chrono::seconds(30);

// How long the background thread polls for the next tensor after a cycle
// that did work (Note [Polling after activity]).
constexpr auto kPollAfterWork = std::chrono::microseconds(200);

// Note [Idle cycles]
// A rank with nothing in flight still runs a cycle now and then: a peer may
// be waiting in negotiation for a tensor this rank never submits (a stall to
// report), or for its shutdown or join to be seen. Nothing else needs it: a
// rank that submits a tensor runs a cycle at once, and that is the cycle its
// waiting peers pair with. Each idle cycle wakes this rank's background
// thread and, through the negotiation, a waiting peer's, on cores the
// framework is computing on: on 2 ranks of the CNN benchmark (one compute
// thread each, 2 cores) the background thread used 24-30 ms of CPU per step
// with an idle cycle every 1 ms, 14 ms with one every 10 ms (per-thread CPU
// time from /proc). So idle cycles come at most every kIdleCycle; the cycle
// time still paces cycles right after work.
constexpr auto kIdleCycle = std::chrono::milliseconds(10);

// Note [Backing off a stall]
// A rank with entries in flight negotiates again as soon as a cycle ends: the
// transport blocks until the other ranks take part, so a rank waiting for
// slower peers is paced by their cycles. But when every rank waits for
// something no rank will submit (ranks that submit different names or
// different collectives: unnamed tensors after a join, rank 0 in an
// allreduce while rank 1 is in an allgather; or a rank that stopped without
// join()), each one's cycle pairs at once with the others' and they all spin
// at full speed until the stall inspector fails the tensors. So once no
// cycle has completed anything for kStallBackoffAfter while entries were in
// flight, the next cycle waits a pause that grows with the time nothing has
// completed, 1/kStallBackoffFraction of it, up to kIdleCycle: a rank that
// has waited t for its peers loses at most t/10 more when they arrive, and a
// disagreement costs one cycle per kIdleCycle per rank after a tenth of a
// second (bench/waiting.py measures it). Anything completing, and any local
// submission (which also starts a cycle at once), ends the pause. A thread
// waiting in synchronize() leaves the paced cycles to the background thread.
constexpr auto kStallBackoffAfter = std::chrono::milliseconds(50);
constexpr int kStallBackoffFraction = 10;

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
  for (const auto& ranks : process_sets) addProcessSet(ranks);

  if (!config_.timeline_path.empty()) startTimeline(config_.timeline_path, config_.timeline_mark_cycles);
  thread_ = std::thread([this] {
    // Named so that top -H, py-spy and gdb show which thread is hvdlite's.
    pthread_setname_np(pthread_self(), "hvdlite-bg");
    background_id_ = std::this_thread::get_id();
    backgroundLoop();
  });
  watchdog_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "hvdlite-watch");
    watchdogLoop();
  });
}

Runtime::~Runtime() { shutdown(); }

// Local rank: position among the ranks on this host. Cross rank: position
// among the ranks that share this local rank (one per host), as in Horovod.
void Runtime::computeTopology() {
  const auto& hosts = transport_->hostnames();
  Topology t;
  t.rank = config_.rank;
  t.size = config_.size;
  const std::string& mine = hosts.at(config_.rank);
  t.local_rank = t.local_size = 0;
  for (int r = 0; r < config_.size; ++r) {
    if (hosts[r] != mine) continue;
    if (r < config_.rank) ++t.local_rank;
    ++t.local_size;
  }
  std::map<std::string, int> per_host;
  std::vector<int> local_of(config_.size);
  for (int r = 0; r < config_.size; ++r) local_of[r] = per_host[hosts[r]]++;
  t.cross_rank = t.cross_size = 0;
  for (int r = 0; r < config_.size; ++r) {
    if (local_of[r] != t.local_rank) continue;
    if (r < config_.rank) ++t.cross_rank;
    ++t.cross_size;
  }
  t.homogeneous = std::all_of(per_host.begin(), per_host.end(),
                              [&](const auto& kv) { return kv.second == per_host.begin()->second; });
  // The launcher knows the layout it intended; trust it where it says.
  if (config_.local_rank >= 0) t.local_rank = config_.local_rank;
  if (config_.local_size >= 0) t.local_size = config_.local_size;
  if (config_.cross_rank >= 0) t.cross_rank = config_.cross_rank;
  if (config_.cross_size >= 0) t.cross_size = config_.cross_size;
  topology_ = t;
}

std::shared_ptr<ProcessSet> Runtime::makeProcessSet(int32_t id, std::vector<int> ranks) {
  auto set = std::make_shared<ProcessSet>();
  set->id = id;
  set->ranks = std::move(ranks);
  if (set->rankOf(config_.rank) >= 0) {
    set->comm = transport_->communicator(set->ranks);
    set->control = transport_->controlCommunicator(set->ranks);
    ControllerOptions options;
    options.cache_capacity = static_cast<size_t>(config_.cache_capacity);
    options.stall_warning = seconds(config_.stall_warning_s);
    options.stall_shutdown = seconds(config_.stall_shutdown_s);
    options.join_average_active = config_.join_average_active;
    options.test_corrupt_requests = config_.test_corrupt_requests;
    options.divergence_warning = seconds(config_.divergence_warning_s);
    options.divergence_shutdown = seconds(config_.divergence_shutdown_s);
    set->controller = std::make_unique<Controller>(id, set->control ? *set->control : *set->comm,
                                                   options, timeline_);
    set->device_comm = device_transport_->communicator(*set->comm);
    if (id == 0 && config_.hierarchical_allreduce == 1) addHierarchy(*set);
    logProcessSet(*set);
  }
  return set;
}

void Runtime::logStart(int round) const {
  if (!logEnabled(LogLevel::kInfo)) return;
  const auto& t = topology_;
  const auto& hosts = transport_->hostnames();
  log(LogLevel::kInfo, config_.rank,
      detail::concat("topology: rank ", t.rank, " of ", t.size, " on host '", hosts.at(config_.rank),
                     "', local rank ", t.local_rank, " of ", t.local_size, ", cross rank ", t.cross_rank,
                     " of ", t.cross_size, t.homogeneous ? "" : " (hosts run different numbers of ranks)"));
  if (config_.rank != 0) return;
  // Hosts in the order of their first rank, each with its ranks.
  std::vector<std::pair<std::string, std::vector<int>>> by_host;
  for (int r = 0; r < config_.size; ++r) {
    auto it = std::find_if(by_host.begin(), by_host.end(),
                           [&](const auto& h) { return h.first == hosts[r]; });
    if (it == by_host.end()) it = by_host.insert(by_host.end(), {hosts[r], {}});
    it->second.push_back(r);
  }
  std::string text;
  for (const auto& [host, ranks] : by_host) {
    text += detail::concat(text.empty() ? "" : "; ", "'", host, "': ranks ", detail::joinRanks(ranks));
  }
  log(LogLevel::kInfo, 0,
      detail::concat("hosts (", by_host.size(), "): ", text, "; job '", config_.job_id,
                     "', rendezvous round ", round));
  log(LogLevel::kInfo, 0,
      detail::concat("settings: fusion threshold ", config_.fusion_threshold, " B, cycle time ",
                     config_.cycle_time_ms, " ms, response cache ", config_.cache_capacity,
                     " entries, autotune ", config_.autotune ? "on" : "off", ", stall check ",
                     config_.stall_warning_s > 0 ? detail::concat(config_.stall_warning_s, " s") : "off",
                     ", stall shutdown ",
                     config_.stall_shutdown_s > 0 ? detail::concat(config_.stall_shutdown_s, " s") : "never",
                     ", divergence check ",
                     config_.divergence_warning_s > 0 ? detail::concat(config_.divergence_warning_s, " s") : "off",
                     ", divergence shutdown ",
                     config_.divergence_shutdown_s > 0 ? detail::concat(config_.divergence_shutdown_s, " s")
                                                       : "never",
                     ", call sites ", config_.call_sites ? "on" : "off",
                     ", timeline ", config_.timeline_path.empty() ? "off" : config_.timeline_path));
}

// Why the set's data goes over set.comm's transport.
std::string Runtime::transportReason(const ProcessSet& set) const {
  if (config_.transport == "mpi") {
    return "HVDLITE_CPU_OPERATIONS=mpi, set by the user or by default under mpirun when built with MPI";
  }
  if (config_.transport == "tcp") return "HVDLITE_CPU_OPERATIONS=tcp or HVDLITE_SHM_DISABLE=1";
  if (set.ranks.size() < 2) return "a single member: nothing to move";
  if (set.comm->describe() == "shared memory") {
    return "all members on host '" + transport_->hostnames().at(config_.rank) + "'";
  }
  if (set.comm->describe().rfind("two levels", 0) == 0) {
    return config_.hierarchical_allreduce == 1
               ? "HVDLITE_HIERARCHICAL_ALLREDUCE=1"
               : "several hosts with the same number of members each; allreduce from 256 KiB (Note "
                 "[Two-level allreduce], Note [Two-level allgather]; HVDLITE_HIERARCHICAL_ALLREDUCE=0 "
                 "and HVDLITE_HIERARCHICAL_ALLGATHER=0 for one flat ring)";
  }
  if (config_.hierarchical_allreduce == 0 && config_.hierarchical_allgather == 0) {
    return "members on several hosts; HVDLITE_HIERARCHICAL_ALLREDUCE=0 and HVDLITE_HIERARCHICAL_ALLGATHER=0";
  }
  return "members on several hosts, not the same number (two or more) on each: one flat ring";
}

void Runtime::logProcessSet(const ProcessSet& set) const {
  HVD_LOG(kDebug, config_.rank, "process set ", set.id, ": created its ", set.comm->describe(),
          " communicator (rank ", set.comm->rank(), " of ", set.comm->size(), ")",
          set.control ? detail::concat(" and a ", set.control->describe(), " one to negotiate over") : "");
  if (!logEnabled(LogLevel::kInfo) || set.comm->rank() != 0) return;
  std::string negotiation = set.control ? detail::concat(set.control->describe(), " (HVDLITE_CONTROLLER=",
                                                         config_.controller, ")")
                                        : std::string("the same");
  std::string hierarchy = set.local_comm ? detail::concat("; hierarchical allreduce for CUDA tensors: ",
                                                          set.local_comm->describe(), " within a host, ",
                                                          set.cross_comm->describe(), " across hosts")
                                         : std::string();
  log(LogLevel::kInfo, config_.rank,
      detail::concat("process set ", set.id, " (ranks ", detail::joinRanks(set.ranks), "): data over ",
                     set.comm->describe(), " (", transportReason(set), "), negotiation over ", negotiation,
                     hierarchy));
}

// Note [Hierarchical allreduce] in device_executor.cc. For several hosts laid
// out alike; with one rank per host the local step is a 1-rank NCCL
// communicator and every byte crosses on the CPU transport (what a user who
// asks for it there gets; a flat NCCL communicator would use NCCL's own
// network transport instead).
void Runtime::addHierarchy(ProcessSet& set) {
  // A rank's part of the buffer is its position among its host's ranks (its
  // rank in the local communicator), so parts with the same position meet.
  const auto& hosts = transport_->hostnames();
  std::vector<int> position(config_.size), local, cross;
  std::map<std::string, int> seen;  // host -> ranks seen so far there
  for (int r = 0; r < config_.size; ++r) {
    position[r] = seen[hosts[r]]++;
    if (hosts[r] == hosts[config_.rank]) local.push_back(r);
  }
  if (seen.size() < 2 || !topology_.homogeneous) return;
  for (int r = 0; r < config_.size; ++r) {
    if (position[r] == position[config_.rank]) cross.push_back(r);
  }
  // Every rank creates its host's communicator, then its cross one: creation
  // is collective among each one's members, in the same order everywhere.
  set.local_comm = transport_->communicator(local);
  set.cross_comm = transport_->communicator(cross);
  set.local_device_comm = device_transport_->communicator(*set.local_comm);
}

int32_t Runtime::addProcessSet(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  std::lock_guard<std::mutex> lock(sets_mutex_);
  int32_t id = next_set_id_++;
  sets_[id] = makeProcessSet(id, sorted);
  return id;
}

void Runtime::removeProcessSet(int32_t id) {
  std::shared_ptr<ProcessSet> removed;
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    auto it = sets_.find(id);
    if (it != sets_.end()) removed = it->second;
    sets_.erase(id);
  }
  // Every member runs this response: release its GPU resources as they all
  // agree (Note [Failing, not hanging]).
  if (removed && removed->isMember()) closeDevices(*removed);
  // Nothing more can run on it: fail what was still queued for it.
  for (auto& entry : queue_.drainProcessSet(id)) {
    complete(*entry, Status::Error(StatusKind::kInvalidArgument,
                                   std::string(opTypeName(entry->op)) + " of '" + entry->name +
                                       "' failed: its process set " + std::to_string(id) +
                                       " was removed"));
  }
}

std::vector<int32_t> Runtime::processSetIds() const {
  std::lock_guard<std::mutex> lock(sets_mutex_);
  std::vector<int32_t> ids;
  for (const auto& [id, set] : sets_) ids.push_back(id);
  return ids;
}

std::vector<int> Runtime::processSetRanks(int32_t id) const {
  std::lock_guard<std::mutex> lock(sets_mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    throw InvalidArgument("process set " + std::to_string(id) +
                          " does not exist (it was never added, or was removed)");
  }
  return it->second->ranks;
}

std::string Runtime::processSetTransport(int32_t id) const {
  std::lock_guard<std::mutex> lock(sets_mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    throw InvalidArgument("process set " + std::to_string(id) +
                          " does not exist (it was never added, or was removed)");
  }
  if (!it->second->isMember()) return "";
  return it->second->comm->describe();
}

// Note [Cycles on the waiting thread]
// A cycle run by the background thread costs two hand-offs when the caller
// is waiting for it: wake the background thread, then wake the caller. On a
// busy core each hand-off can wait for a scheduler tick (4 ms here), and
// even on an idle one it costs a few microseconds, more than a small
// allreduce over shared memory. So a framework thread that waits for a result
// runs the cycles itself, as MPI progresses its requests on the thread that
// waits. Cycles stay one at a time per process (cycle_mutex_), so ranks still
// run them in matching order; which thread runs one does not matter to the
// other ranks. The background thread keeps the cycles going for work nobody
// waits on yet (gradients submitted during backward) and when ranks are idle.
// Not on runtimes that have seen CUDA tensors: a device cycle selects the
// CUDA device on the thread that runs it. A cycle may still be running on a
// framework thread when the first CUDA entry arrives; such a batch sets the
// thread's device back when done (DeviceComms::restore_caller_device).
void Runtime::backgroundLoop() {
  while (!stopped_) {
    const auto cycle = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(tunedParameters().cycle_time_ms));
    bool did_work;
    {
      std::unique_lock<std::mutex> lock(cycle_mutex_, std::try_to_lock);
      if (!lock.owns_lock()) {
        // A waiting caller runs the cycles; it hands them back when done.
        queue_.waitForWake(Clock::now() + cycle);
        continue;
      }
      if (stopped_) break;
      did_work = queue_.inFlight() > 0;
      cycleLocked();
    }
    if (stopped_) break;
    // Entries still waiting for other ranks: negotiate again at once. The
    // transport blocks until the others take part, so this does not spin;
    // it only saves a cycle's sleep once the last rank submits. Unless
    // nothing completes any more (Note [Backing off a stall]).
    const auto pause = queue_.inFlight() > 0 ? stallPause() : Clock::duration::zero();
    if (queue_.inFlight() > 0 && pause == Clock::duration::zero()) continue;
    // Nothing in flight: the next cycle is due a cycle time after the last
    // one (whichever thread ran it) if that one did work, else after
    // kIdleCycle (Note [Idle cycles]), or as soon as an entry asks for it.
    auto poll = did_work && pause == Clock::duration::zero() ? kPollAfterWork : Clock::duration::zero();
    auto period = did_work ? cycle : std::max<Clock::duration>(cycle, kIdleCycle);
    if (pause > Clock::duration::zero()) period = pause;
    while (!stopped_) {
      auto due = Clock::time_point(Clock::duration(last_cycle_.load())) + period;
      if (Clock::now() >= due || queue_.waitForWork(due, poll)) break;
      poll = Clock::duration::zero();
    }
  }
  if (!failed_) {
    // Agreed shutdown: every rank is here, and the CPU transport still works.
    for (const auto& set : memberSets()) closeDevices(*set);
    failAtShutdown();
  }
  loop_exited_ = true;
}

// Note [Naming who shut down] in controller.cc.
void Runtime::failAtShutdown() {
  ShutdownReport report;
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    report = shutdown_report_;
  }
  std::string who = report.requested.empty()
                        ? std::string("a rank")
                        : detail::concat(report.requested.size() == 1 ? "rank " : "ranks ",
                                         detail::joinRanks(report.requested));
  std::string shut = "hvdlite was shut down (" + who + " called shutdown() or its process is exiting)";
  ErrorDetails details;
  details.ranks.assign(report.requested.begin(), report.requested.end());
  failAll(StatusKind::kShutdown, details, [&](const TensorEntry& entry, ErrorDetails& mine) {
    auto lacking = entry.process_set_id == 0 ? report.lacking(entry.name, config_.rank) : std::vector<int>();
    mine.missing_ranks.assign(lacking.begin(), lacking.end());
    if (lacking.empty()) return shut + " before this operation completed";
    return detail::concat(lacking.size() == 1 ? "rank " : "ranks ", detail::joinRanks(lacking),
                          " never submitted it, and ", shut,
                          ". Every rank of the process set must submit each collective: look for a rank "
                          "that returned early, skipped a step or ran out of data (hvd.join() lets a "
                          "rank that ran out of data take part in allreduces with zeros)");
  });
}

void Runtime::cycleLocked() {
  const auto now = Clock::now().time_since_epoch().count();
  last_cycle_ = now;
  // A cycle with nothing in flight is not waiting on anyone.
  if (queue_.inFlight() == 0) last_progress_ = now;
  timeline_.markCycleStart();
  try {
    if (!runCycle()) stopped_ = true;
  } catch (const std::exception& e) {
    handleFatal(failureOf(e));
    stopped_ = true;
  }
  // The background thread may be waiting for a caller to hand back.
  if (stopped_) queue_.wake();
}

Clock::duration Runtime::stallPause() const {
  auto since = Clock::now() - Clock::time_point(Clock::duration(last_progress_.load()));
  if (since < kStallBackoffAfter) return Clock::duration::zero();
  return std::min<Clock::duration>(since / kStallBackoffFraction, kIdleCycle);
}

bool Runtime::runCycleOnCaller() {
  // While stalled, the background thread paces the cycles.
  if (stopped_ || device_entries_ || stallPause() > Clock::duration::zero()) return false;
  std::unique_lock<std::mutex> lock(cycle_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || stopped_) return false;
  cycleLocked();
  return true;
}

void Runtime::releaseCycles() {
  if (queue_.inFlight() > 0) queue_.wake();
}

bool Runtime::runCycle() {
  std::vector<std::shared_ptr<ProcessSet>> sets;
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    for (const auto& [id, set] : sets_) sets.push_back(set);
  }
  // Every rank walks the sets in id order, so the traffic between any two
  // ranks is in the same order on both sides.
  for (const auto& set : sets) {
    if (!set->isMember()) continue;
    bool is_global = set->id == 0;
    std::string proposal;
    if (is_global && proposal_) proposal = serializeParameters(*proposal_);
    auto outcome = set->controller->negotiate(queue_, is_global && shutdown_requested_, proposal);
    if (is_global && outcome.shutdown) {
      std::lock_guard<std::mutex> lock(failure_mutex_);
      shutdown_report_ = std::move(outcome.shutdown_report);
      return false;
    }
    if (is_global) proposal_.reset();
    // Every rank applies a change in the same cycle, before anything runs
    // in it, so that their fusion plans agree.
    if (!outcome.parameters.empty()) applyParameters(parseParameters(outcome.parameters));
    DeviceComms device{set->device_comm.get(), set->local_device_comm.get(), set->cross_comm.get(), ownDevice(),
                       std::this_thread::get_id() != background_id_.load()};
    executor_.execute(outcome.responses, *set->comm, device, queue_);
    if (!outcome.responses.empty()) last_progress_ = Clock::now().time_since_epoch().count();
    if (is_global && autotuner_) {
      auto change = autotuner_->record(outcome.responses, Clock::now());
      if (change) proposal_ = change;
    }
  }
  return true;
}

void Runtime::applyParameters(const TunedParameters& parameters) {
  if (config_.rank == 0 && logEnabled(LogLevel::kInfo)) {
    TunedParameters before = tunedParameters();
    log(LogLevel::kInfo, 0,
        detail::concat("autotune: fusion threshold ", before.fusion_threshold, " -> ",
                       parameters.fusion_threshold, " B, cycle time ", before.cycle_time_ms, " -> ",
                       parameters.cycle_time_ms, " ms",
                       parameters.final ? " (final: the search is over)" : ""));
  }
  executor_.setFusionThreshold(parameters.fusion_threshold);
  std::lock_guard<std::mutex> lock(tuned_mutex_);
  tuned_ = parameters;
}

TunedParameters Runtime::tunedParameters() const {
  std::lock_guard<std::mutex> lock(tuned_mutex_);
  return tuned_;
}

// A peer was lost or a connection broke. Record first-hand what happened in
// the store (the first record wins, so every rank reports the root cause,
// not the cascade), then cut our connections so ranks blocked on us notice.
// The record is the whole failure (serializeFailure), so every rank raises
// the first one's type with its details, not only its words.
Status Runtime::recordFailure(const Status& failure) {
  Status reason = failure;
  try {
    std::string first;
    if (store_->tryGet(key_prefix_ + "abort/1", &first)) {
      reason = parseFailure(first);
    } else {
      int64_t n = store_->add(key_prefix_ + "abort_count", 1);
      store_->set(key_prefix_ + "abort/" + std::to_string(n), serializeFailure(failure));
      if (n > 1 && store_->tryGet(key_prefix_ + "abort/1", &first)) reason = parseFailure(first);
    }
  } catch (const std::exception&) {
    // The store may be gone with the launcher; our own view will do.
  }
  return reason;
}

Status Runtime::failureOf(const std::exception& error) const {
  if (const auto* lost = dynamic_cast<const PeerLost*>(&error)) {
    auto details = std::make_shared<ErrorDetails>();
    const int peer = lost->peerRank();
    details->ranks = {peer};
    const auto& hosts = transport_->hostnames();
    const std::string host = peer >= 0 && peer < static_cast<int>(hosts.size()) ? hosts[peer] : std::string();
    if (!host.empty()) details->hosts = {host};
    if (lost->hostSilent() && !host.empty()) details->lost_hosts = {host};
    return Status::Error(StatusKind::kTransport, error.what(), details);
  }
  // A peer frozen inside a transfer (Note [Stalled transfers]).
  if (dynamic_cast<const Timeout*>(&error)) return Status::Error(StatusKind::kTimeout, error.what());
  return Status::Error(StatusKind::kTransport, error.what());
}

void Runtime::handleFatal(const Status& failure) {
  Status found;
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    found = watchdog_failure_;
  }
  // What the watchdog saw is the cause; the broken connection, its effect.
  Status reason = found.message.empty() ? recordFailure(failure) : found;
  // Logged before abort(): aborting an MPI transport ends the process.
  if (!abort_logged_) logWarning(config_.rank, "stopping collectives: " + reason.message);
  abortDevices();
  transport_->abort();
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    failure_ = reason;
  }
  failed_ = true;
  failAll(reason);
}

// Note [Aborting from a waiting thread]
// A thread waiting for a result that gives up (Ctrl-C, a SIGALRM timeout:
// Note [Interruptible waits] in python/bind_collectives.cc) must not leave
// its peers waiting for it until the stall shutdown time. It cannot fail the
// entries itself: the thread running a cycle owns them. So it records why
// for every rank (the store's first failure, as handleFatal does), logs it,
// and closes the transport: the cycle in progress, or the next one (woken
// here), fails with a TransportError and handleFatal fails every entry with
// the recorded reason, and each peer blocked on this rank notices the closed
// connection or aborted segment and reports the same reason. On an MPI
// transport, abort() is MPI_Abort, which ends every process of the job.
void Runtime::abort(const std::string& why) {
  if (stopped_) return;
  logWarning(config_.rank,
             "stopping collectives: " + recordFailure(Status::Error(StatusKind::kTransport, why)).message);
  abort_logged_ = true;
  abortDevices();
  transport_->abort();
  queue_.wake();
}

// Note [Failing, not hanging]. Runs beside the background thread, which may
// be blocked on a peer or the GPU: aborting NCCL and the connections ends
// whatever it waits for, and its own failure path (handleFatal) reports what
// was found here.
void Runtime::watchdogLoop() {
  const auto period = std::chrono::milliseconds(100);
  std::unique_lock<std::mutex> lock(watchdog_mutex_);
  // Asleep until the first CUDA tensor: a CPU-only rank's thread never wakes
  // (a periodic wake-up on a busy core can cost a collective its core).
  watchdog_wake_.wait(lock, [this] { return watchdog_stop_ || device_entries_; });
  while (!watchdog_wake_.wait_for(lock, period, [this] { return watchdog_stop_; })) {
    if (failed_) continue;
    lock.unlock();
    std::string found = checkDevices();
    if (!found.empty()) {
      Status failure = recordFailure(Status::Error(StatusKind::kTransport, found));
      bool first;
      {
        std::lock_guard<std::mutex> guard(failure_mutex_);
        first = watchdog_failure_.message.empty() && failure_.message.empty();
        if (first) watchdog_failure_ = failure;
      }
      if (first) {
        logWarning(config_.rank, "aborting NCCL: " + failure.message);
        abortDevices();
        transport_->abort();
        queue_.wake();
      }
    }
    lock.lock();
  }
}

std::vector<std::shared_ptr<ProcessSet>> Runtime::memberSets() const {
  std::lock_guard<std::mutex> lock(sets_mutex_);
  std::vector<std::shared_ptr<ProcessSet>> sets;
  for (const auto& [id, set] : sets_) {
    if (set->isMember()) sets.push_back(set);
  }
  return sets;
}

std::string Runtime::checkDevices() {
  for (const auto& set : memberSets()) {
    for (auto* dev : {set->device_comm.get(), set->local_device_comm.get()}) {
      if (!dev) continue;
      std::string failure = dev->health(config_.nccl_timeout_s);
      if (!failure.empty()) return failure;
    }
  }
  return {};
}

void Runtime::closeDevices(ProcessSet& set) {
  for (auto* dev : {set.device_comm.get(), set.local_device_comm.get()}) {
    if (!dev) continue;
    try {
      dev->close();
    } catch (const std::exception& e) {
      logWarning(config_.rank, "closing the GPU communicator of process set " + std::to_string(set.id) +
                                   " failed: " + e.what());
      dev->abort();
    }
  }
}

void Runtime::abortDevices() {
  for (const auto& set : memberSets()) {
    for (auto* dev : {set->device_comm.get(), set->local_device_comm.get()}) {
      if (dev) dev->abort();
    }
  }
}

int Runtime::ownDevice() const {
  int device = own_device_.load();
  if (device >= 0) return device;
  return config_.cuda_device >= 0 ? config_.cuda_device : topology_.local_rank;
}

void Runtime::failAll(const Status& failure) {
  failAll(failure.kind, failure.details ? *failure.details : ErrorDetails(),
          [&](const TensorEntry&, ErrorDetails&) { return failure.message; });
}

void Runtime::failAll(StatusKind kind, const ErrorDetails& details,
                      const std::function<std::string(const TensorEntry&, ErrorDetails&)>& why) {
  auto entries = executor_.takeInFlight();
  for (auto& e : queue_.drainAll()) entries.push_back(std::move(e));
  for (auto& entry : entries) {
    if (!entry) continue;
    auto mine = std::make_shared<ErrorDetails>(details);
    mine->tensor_names = {entry->name};
    RankCall call;
    call.rank = config_.rank;
    call.tensor = entry->name;
    call.op = opTypeName(entry->op);
    if (entry->call_site) call.site = *entry->call_site;
    mine->calls.push_back(std::move(call));
    std::string message = std::string(opTypeName(entry->op)) + " of '" + entry->name + "' failed: " + why(*entry, *mine);
    complete(*entry, Status::Error(kind, std::move(message), std::move(mine)));
  }
}

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

void Runtime::enqueue(TensorEntryPtr entry, bool wake_background) {
  if (failed_ || loop_exited_ || shutdown_requested_) {
    Status failure;
    {
      std::lock_guard<std::mutex> lock(failure_mutex_);
      failure = failure_;
    }
    if (failure.message.empty()) failure = Status::Error(StatusKind::kShutdown, "hvdlite has been shut down");
    // The failure's own type and details: a program that catches, say, a
    // lost peer here reads the same fields as from the collective that failed.
    throw StatusError(Status::Error(failure.kind,
                                    "cannot start " + std::string(opTypeName(entry->op)) + " of '" + entry->name +
                                        "': " + failure.message +
                                        ". Restart the job, or call shutdown() and init() again (elastic "
                                        "training).",
                                    failure.details));
  }
  std::shared_ptr<ProcessSet> set;
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    auto it = sets_.find(entry->process_set_id);
    if (it != sets_.end()) set = it->second;
  }
  validateEntry(*entry, set.get(), config_.rank);
  if (entry->device >= 0) {
    requireDevice(*entry);
    // Tensor collectives read the input: Note [Ready at enqueue].
    if (!entry->ready_event && isTensorCollective(entry->op)) {
      entry->owned_ready_event = device_transport_->recordReady(
          entry->device, entry->stream, std::string(opTypeName(entry->op)) + " of '" + entry->name + "'");
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
  // Ends a stall's pause (Note [Backing off a stall]).
  last_progress_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  queue_.add(std::move(entry), config_.rank, wake_background || device_entries_);
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

}  // namespace hvdlite::core
