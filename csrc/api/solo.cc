#include "api/solo.h"

#include <algorithm>
#include <cstring>

#include "common/errors.h"
#include "common/logging.h"
#include "common/reduce.h"
#include "core/status.h"

namespace hvdlite::api {

namespace {

std::string siteText(const core::TensorEntry& entry) {
  return entry.call_site && entry.call_site->known() ? " at " + entry.call_site->text() : "";
}

std::string describe(const core::TensorEntry& entry) {
  return detail::concat(opTypeName(entry.op), " '", entry.name, "'", siteText(entry));
}

}  // namespace

void Solo::begin(std::string who, std::string why_harmless, std::string refusal) {
  std::lock_guard<std::mutex> lock(mutex_);
  who_ = std::move(who);
  why_harmless_ = std::move(why_harmless);
  refusal_ = std::move(refusal);
  warned_.clear();
  active_.store(true, std::memory_order_release);
}

void Solo::end() {
  std::lock_guard<std::mutex> lock(mutex_);
  active_.store(false, std::memory_order_release);
}

bool Solo::active() const { return active_.load(std::memory_order_acquire); }

void Solo::complete(core::TensorEntry& entry, core::Runtime& runtime) {
  check(entry, runtime);
  compute(entry, runtime);
  warnOnce(entry, runtime.config().rank);
  entry.callback(entry, core::Status::Ok());
}

// What the job itself would refuse in the caller's thread (an unknown
// process set, a set without this rank, a root outside the set) is refused
// alike; what only a job of one rank can give is refused as Note [Solo
// collectives] says.
void Solo::check(const core::TensorEntry& entry, const core::Runtime& runtime) const {
  const int rank = runtime.config().rank;
  const bool tensor_result = entry.op == OpType::kAllreduce || entry.op == OpType::kBroadcast;
  if (!tensor_result && entry.op != OpType::kBarrier && entry.op != OpType::kJoin) {
    refuse(entry, "its result depends on the job's size or changes the job (unlike an allreduce or "
                  "broadcast, whose result state.sync() replaces), so it cannot be computed on this "
                  "worker alone");
  }
  auto ranks = runtime.processSetRanks(entry.process_set_id);  // InvalidArgument when unknown
  if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) {
    throw InvalidArgument(detail::concat(describe(entry), ": rank ", rank, " is not in process set ",
                                         entry.process_set_id));
  }
  if (entry.op == OpType::kBroadcast && std::find(ranks.begin(), ranks.end(), entry.root_rank) == ranks.end()) {
    throw InvalidArgument(detail::concat(describe(entry), ": root rank ", entry.root_rank,
                                         " is not in process set ", entry.process_set_id));
  }
  if (entry.device >= 0 && tensor_result) {
    const bool scaled = entry.op == OpType::kAllreduce && (entry.prescale != 1.0 || entry.postscale != 1.0);
    const bool elsewhere = entry.output != entry.input && entry.ready_event != nullptr;
    if (scaled || elsewhere) {
      refuse(entry, scaled ? "it is on a GPU with scale factors, which this worker has no kernel to apply alone"
                           : "it is on a GPU, written on another stream than the one its copy would run on");
    }
  }
}

void Solo::compute(core::TensorEntry& entry, core::Runtime& runtime) const {
  if (entry.op == OpType::kJoin) {
    entry.result_value = runtime.config().rank;  // the last (only) rank to join
    return;
  }
  if (entry.op == OpType::kBarrier) return;
  const size_t count = entry.elementCount();
  const size_t bytes = count * dtypeSize(entry.dtype);
  if (entry.device >= 0) {  // unscaled (check): the input, or a copy of it
    if (entry.output != entry.input && bytes > 0) {
      runtime.copyOnDevice(entry.device, entry.stream, entry.output, entry.input, bytes);
    }
    return;
  }
  if (entry.output != entry.input && count > 0) std::memcpy(entry.output, entry.input, bytes);
  if (entry.op == OpType::kAllreduce) {
    // One rank: its prescaled values are the sum (Average divides by 1),
    // then the postscale factor.
    scaleInPlace(entry.output, count, entry.dtype, entry.prescale);
    scaleInPlace(entry.output, count, entry.dtype, entry.postscale);
  }
}

void Solo::warnOnce(const core::TensorEntry& entry, int rank) {
  std::string site = entry.call_site && entry.call_site->known()
                         ? entry.call_site->file + ":" + std::to_string(entry.call_site->line)
                         : "unknown";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!warned_.insert(site).second) return;
  }
  logWarning(rank, detail::concat(who_, " called ", describe(entry),
                                  " before entering hvd.elastic.run; it completed on this worker alone, "
                                  "as in a job of one rank (its own values), and the running workers never "
                                  "saw it. ",
                                  why_harmless_));
}

void Solo::refuse(const core::TensorEntry& entry, const std::string& why) const {
  std::lock_guard<std::mutex> lock(mutex_);
  throw core::StatusError(core::Status::Error(
      core::StatusKind::kOutsideRun,
      detail::concat(who_, " called ", describe(entry), " before entering hvd.elastic.run, where the other "
                     "ranks are; ", why, ". ", refusal_)));
}

}  // namespace hvdlite::api
