#include "transport/stall.h"

#include "common/errors.h"

namespace hvdlite::transport {

StallClock::StallClock(const StallLimits& limits, int rank)
    : limits_(limits), rank_(rank), start_(std::chrono::steady_clock::now()) {}

void StallClock::check(const char* what, int peer) {
  auto waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_);
  auto seconds = static_cast<int>(waited.count());
  if (limits_.fail_after.count() > 0 && waited >= limits_.fail_after) {
    throw Timeout(detail::concat(
        "rank ", rank_, " gave up ", what, " after waiting ", seconds, " s for rank ", peer,
        ", which never took part (HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=",
        static_cast<int>(limits_.fail_after.count()), "). Rank ", peer,
        " is alive but not progressing: stopped (SIGSTOP, a debugger), stuck in a call that "
        "never returns, or its host is frozen; see its log"));
  }
  if (warned_ || limits_.warn_after.count() <= 0 || waited < limits_.warn_after || !limits_.warn) {
    return;
  }
  warned_ = true;
  std::string end = limits_.fail_after.count() > 0
                        ? detail::concat("; this wait fails after ",
                                         static_cast<int>(limits_.fail_after.count()),
                                         " s (HVDLITE_STALL_SHUTDOWN_TIME_SECONDS)")
                        : std::string("; HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=0: waiting forever");
  limits_.warn(detail::concat("stalled inside ", what, ": waited ", seconds, " s for rank ", peer,
                              ", which has not taken part (stopped, stuck, or its host is frozen?)",
                              end));
}

}  // namespace hvdlite::transport
