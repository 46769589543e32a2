// The Runtime's process sets: this rank's place in the job (topology), the
// creation of a set's communicators and controller, adding and removing sets
// at run time, and the queries about them.
#include "core/runtime.h"

#include <algorithm>
#include <chrono>

#include "common/errors.h"
#include "common/logging.h"

namespace hvdlite::core {
namespace {

std::chrono::duration<double> seconds(double s) { return std::chrono::duration<double>(s); }

}  // namespace

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
    if (id == 0 && config_.hierarchical_allreduce == 1) {
      set->device_comm = transport::hierarchicalDeviceCommunicator(std::move(set->device_comm), set->ranks,
                                                                   config_.rank, *transport_, *device_transport_);
    }
    logProcessSet(*set);
  }
  return set;
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
  const std::string device = set.device_comm->describe();
  std::string hierarchy = device.rfind("two levels", 0) == 0 ? "; CUDA tensors in " + device : std::string();
  log(LogLevel::kInfo, config_.rank,
      detail::concat("process set ", set.id, " (ranks ", detail::joinRanks(set.ranks), "): data over ",
                     set.comm->describe(), " (", transportReason(set), "), negotiation over ", negotiation,
                     hierarchy));
}

int32_t Runtime::addProcessSet(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  std::lock_guard<std::mutex> lock(sets_mutex_);
  int32_t id = next_set_id_++;
  sets_[id] = makeProcessSet(id, sorted);
  sets_version_.fetch_add(1, std::memory_order_release);
  return id;
}

void Runtime::removeProcessSet(int32_t id) {
  std::shared_ptr<ProcessSet> removed;
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    auto it = sets_.find(id);
    if (it != sets_.end()) removed = it->second;
    sets_.erase(id);
    sets_version_.fetch_add(1, std::memory_order_release);
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

std::vector<std::shared_ptr<ProcessSet>> Runtime::memberSets() const {
  std::lock_guard<std::mutex> lock(sets_mutex_);
  std::vector<std::shared_ptr<ProcessSet>> sets;
  for (const auto& [id, set] : sets_) {
    if (set->isMember()) sets.push_back(set);
  }
  return sets;
}

}  // namespace hvdlite::core
