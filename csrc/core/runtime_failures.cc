// The Runtime's failure handling: what a failed cycle means, the first-hand
// record every rank reports, aborting from a waiting thread, the watchdog
// over the GPU communicators, and failing every pending entry (at a failure
// or at an agreed shutdown).
#include "core/runtime.h"

#include <chrono>
#include <condition_variable>
#include <functional>

#include "common/errors.h"
#include "common/logging.h"

namespace hvdlite::core {

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

std::string Runtime::checkDevices() {
  for (const auto& set : memberSets()) {
    if (!set->device_comm) continue;
    std::string failure = set->device_comm->health(config_.nccl_timeout_s);
    if (!failure.empty()) return failure;
  }
  return {};
}

void Runtime::closeDevices(ProcessSet& set) {
  if (!set.device_comm) return;
  try {
    set.device_comm->close();
  } catch (const std::exception& e) {
    logWarning(config_.rank, "closing the GPU communicator of process set " + std::to_string(set.id) +
                                 " failed: " + e.what());
    set.device_comm->abort();
  }
}

void Runtime::abortDevices() {
  for (const auto& set : memberSets()) {
    if (set->device_comm) set->device_comm->abort();
  }
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

void Runtime::failAll(const Status& failure) {
  failAll(failure.kind, failure.details ? *failure.details : ErrorDetails(),
          [&](const TensorEntry&, ErrorDetails&) { return failure.message; });
}

void Runtime::failAll(StatusKind kind, const ErrorDetails& details,
                      const std::function<std::string(const TensorEntry&, ErrorDetails&)>& why) {
  auto entries = executor_.takeInFlight();
  for (auto& e : queue_.drainAndClose()) entries.push_back(std::move(e));
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

}  // namespace hvdlite::core
