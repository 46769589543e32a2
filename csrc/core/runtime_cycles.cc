// The Runtime's cycle loop: the background thread's pacing, cycles run on a
// waiting caller's thread, one negotiate-then-execute cycle over every
// process set, and the autotuner's parameters applied in step on every rank.
#include "core/runtime.h"

#include <algorithm>
#include <chrono>

#include "common/logging.h"

namespace hvdlite::core {
namespace {

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
//
// Note [The background thread while a caller drives]
// A thread in a tight loop of small synchronous collectives holds
// cycle_mutex_ most of the time. The background thread, finding it held,
// used to look again every cycle time (1 ms), and on finding it free between
// two of the caller's calls ran a cycle of its own: an idle one, whose
// exchange the peers' callers paired with their own tensors' cycles (one
// exchange more for them), or the caller's fresh entry, leaving the caller
// to poll for it. On 2 ranks of 2 cores each such wake-up also preempted a
// rank's caller: ~1,000 wake-ups a second per rank (voluntary context
// switches of hvdlite-bg). Nothing needs it sooner: a caller that stops
// driving with entries still in flight wakes it (releaseCycles), an entry
// submitted with a wake-up after that wakes it too, and with none in flight
// the next cycle is an idle one, due after kIdleCycle. So it looks again
// after kIdleCycle, or when woken.
void Runtime::backgroundLoop() {
  while (!stopped_) {
    const auto cycle = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(tunedParameters().cycle_time_ms));
    bool did_work;
    {
      std::unique_lock<std::mutex> lock(cycle_mutex_, std::try_to_lock);
      if (!lock.owns_lock()) {
        // A waiting caller runs the cycles; it hands them back when done
        // (Note [The background thread while a caller drives]).
        queue_.waitForWake(Clock::now() + std::max<Clock::duration>(cycle, kIdleCycle));
        continue;
      }
      if (stopped_) break;
      did_work = queue_.inFlight() > 0;
      cycleLocked(Clock::now());
    }
    if (stopped_) break;
    // Entries still waiting for other ranks: negotiate again at once. The
    // transport blocks until the others take part, so this does not spin;
    // it only saves a cycle's sleep once the last rank submits. Unless
    // nothing completes any more (Note [Backing off a stall]).
    const auto pause = queue_.inFlight() > 0 ? stallPause(Clock::now()) : Clock::duration::zero();
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

// Note [One clock reading a cycle]
// A clock reading costs about 25 ns here, and a small allreduce's path took
// eight of them (a tenth of its C++ time on one rank, perf): enqueue, the
// wait's start and deadline, the stall check, the cycle, the negotiation,
// the progress mark, and the Python binding's wait slice. So a cycle run on
// a waiting thread takes that thread's reading as its time, for the stall
// check, the cycle's start and the negotiation alike (they need
// milliseconds, not microseconds), and marking progress reads none (below).
//
// Note [Progress marked without a clock]
// The stall pause needs to know when something last moved: a submission, or
// a cycle that completed something. Each used to read the clock for it (two
// more readings a small collective). Instead each sets progress_unmarked_,
// which ends any pause at once, and the next cycle marks the progress at its
// own start, with its reading: later than the event by the gap between two
// cycles, which is no gap while entries are in flight (the next cycle starts
// at once) and does not matter when none are (then every cycle marks
// progress). A submission racing with the mark may leave the flag clear; the
// mark it missed was just made. Timestamps, not ordering: relaxed stores.
void Runtime::cycleLocked(Clock::time_point now) {
  const auto ticks = now.time_since_epoch().count();
  last_cycle_.store(ticks, std::memory_order_relaxed);
  // A cycle with nothing in flight is not waiting on anyone.
  const bool unmarked = progress_unmarked_.load(std::memory_order_relaxed);
  if (unmarked) progress_unmarked_.store(false, std::memory_order_relaxed);
  if (unmarked || queue_.inFlight() == 0) last_progress_.store(ticks, std::memory_order_relaxed);
  timeline_.markCycleStart();
  try {
    if (!runCycle(now)) stopped_ = true;
  } catch (const std::exception& e) {
    handleFatal(failureOf(e));
    stopped_ = true;
  }
  // A set removed in this cycle is released now, not kept until the next one.
  if (cycle_sets_version_ != sets_version_.load(std::memory_order_acquire)) {
    cycle_sets_.clear();
    cycle_sets_version_ = kNoCycleSets;
  }
  // The background thread may be waiting for a caller to hand back.
  if (stopped_) queue_.wake();
}

Clock::duration Runtime::stallPause(Clock::time_point now) const {
  if (progress_unmarked_.load(std::memory_order_relaxed)) return Clock::duration::zero();
  auto since = now - Clock::time_point(Clock::duration(last_progress_.load()));
  if (since < kStallBackoffAfter) return Clock::duration::zero();
  return std::min<Clock::duration>(since / kStallBackoffFraction, kIdleCycle);
}

bool Runtime::runCycleOnCaller(Clock::time_point now) {
  // While stalled, the background thread paces the cycles.
  if (stopped_ || device_entries_ || stallPause(now) > Clock::duration::zero()) return false;
  std::unique_lock<std::mutex> lock(cycle_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || stopped_) return false;
  cycleLocked(now);
  return true;
}

void Runtime::releaseCycles() {
  if (queue_.inFlight() > 0) queue_.wake();
}

// Note [The cycle's process sets]
// Every cycle walks the process sets. Copying them out of sets_ under
// sets_mutex_ cost a lock and a reference count up and down per set on every
// small collective's path, yet they change only when a set is added or
// removed (in a cycle, or at start), which bumps sets_version_ under the same
// lock. So cycles keep their copy while the version stands; the cycle in
// which it changed drops it when done (cycleLocked), so that a removed set is
// released by the cycle that removed it, as before.
void Runtime::refreshCycleSets() {
  if (cycle_sets_version_ == sets_version_.load(std::memory_order_acquire)) return;
  cycle_sets_.clear();
  std::lock_guard<std::mutex> lock(sets_mutex_);
  for (const auto& [id, set] : sets_) cycle_sets_.push_back(set);
  cycle_sets_version_ = sets_version_.load(std::memory_order_relaxed);  // the copy's, under the lock
}

bool Runtime::runCycle(Clock::time_point now) {
  refreshCycleSets();
  // Not refreshed while the loop runs: a set added or removed by a response
  // of this cycle is seen from the next one.
  const std::vector<std::shared_ptr<ProcessSet>>& sets = cycle_sets_;
  // Every rank walks the sets in id order, so the traffic between any two
  // ranks is in the same order on both sides.
  for (const auto& set : sets) {
    if (!set->isMember()) continue;
    bool is_global = set->id == 0;
    std::string proposal;
    if (is_global && proposal_) proposal = serializeParameters(*proposal_);
    auto& outcome = set->controller->negotiate(queue_, is_global && shutdown_requested_, proposal, now);
    if (is_global && outcome.shutdown) {
      std::lock_guard<std::mutex> lock(failure_mutex_);
      shutdown_report_ = std::move(outcome.shutdown_report);
      return false;
    }
    if (is_global) proposal_.reset();
    // Every rank applies a change in the same cycle, before anything runs
    // in it, so that their fusion plans agree.
    if (!outcome.parameters.empty()) applyParameters(parseParameters(outcome.parameters));
    // ownDevice() may load the CUDA runtime: only for a cycle with CUDA work.
    const bool on_device = std::any_of(outcome.responses.begin(), outcome.responses.end(),
                                       [](const Response& r) { return r.device >= 0; });
    DeviceComms device{set->device_comm.get(), on_device ? ownDevice() : -1,
                       std::this_thread::get_id() != background_id_.load()};
    executor_.execute(outcome.responses, *set->comm, device, queue_);
    // Marked by the next cycle (Note [Progress marked without a clock]): the
    // negotiation may have waited long for the other ranks, and this cycle's
    // start would make the next cycle look stalled.
    if (!outcome.responses.empty()) progress_unmarked_.store(true, std::memory_order_relaxed);
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

}  // namespace hvdlite::core
