// Collectives that complete on this rank alone, without the job: those of a
// worker that joined a running elastic job before it enters
// hvd.elastic.run (Note [Late joiners] in hvdlite/common/late_joiners.py).
#pragma once

#include <atomic>
#include <mutex>
#include <set>
#include <string>

#include "core/runtime.h"
#include "core/tensor_entry.h"

namespace hvdlite::api {

// Note [Solo collectives]
// While a Session is solo, every collective it is handed completes at once
// on the caller's thread, as it would in a job of this one rank: an
// allreduce gives the rank's own values (times the scale factors: the sum,
// average, min, max, product or Adasum of one tensor is that tensor), a
// broadcast the rank's own tensor whatever the root, a barrier and a join
// nothing to wait for (the join's last rank is this one). Nothing reaches
// the coordinator, so the running workers never see them, whatever the
// binding (eager, tf.function graphs, XLA custom calls all enter here).
// Each call site is warned about once.
//
// An allgather, alltoall or reducescatter, whose output shape depends on
// the job's size, and adding or removing a process set, would leave a
// result that the job would not have given and that state.sync() does not
// replace: they are refused (a StatusError of kind kCollective) with the
// message the solo mode was given, and the worker fails.
//
// Host memory is copied and scaled here. A CUDA result is the input itself
// or a copy of it queued on the request's stream (after the work that wrote
// the input there, before what reads the output); there is no scaling kernel
// on this path, so an allreduce with scale factors, and an input ordered by
// a ready event of another stream, are refused, saying so.
class Solo {
 public:
  // who: "worker w3 (rank 2 of 3), which joined round 4 of a running elastic
  // job,"; why_harmless and refusal: the end of the warning and of the error.
  void begin(std::string who, std::string why_harmless, std::string refusal);
  void end();
  bool active() const;

  // Completes `entry` (callback attached) on this rank, or throws.
  void complete(core::TensorEntry& entry, core::Runtime& runtime);

 private:
  void check(const core::TensorEntry& entry, const core::Runtime& runtime) const;
  void compute(core::TensorEntry& entry, core::Runtime& runtime) const;
  void warnOnce(const core::TensorEntry& entry, int rank);
  [[noreturn]] void refuse(const core::TensorEntry& entry, const std::string& why) const;

  mutable std::mutex mutex_;  // guards the strings and warned_
  // Read on every submit (Session::submit), so without the mutex: set after
  // the strings it publishes, under the mutex, with release order.
  std::atomic<bool> active_{false};
  std::string who_, why_harmless_, refusal_;
  std::set<std::string> warned_;  // call sites (file:line)
};

}  // namespace hvdlite::api
