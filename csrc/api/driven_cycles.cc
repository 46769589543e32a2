// hvdlite_drive_cycles (api.h): the negotiation cycles run on a binding's
// thread that waits for collectives it submitted through api.h with done
// callbacks, as hvdlite._core's wait() runs them for a Handle (Note [Cycles
// on the waiting thread] in core/runtime_cycles.cc). JAX's CPU handler calls
// it from its completion driver (Note [Driving a step's calls] in
// jax/call_driver.cc).
#include <chrono>
#include <exception>
#include <memory>

#include "api/api.h"
#include "api/session.h"
#include "common/errors.h"

extern "C" int32_t hvdlite_drive_cycles(hvdlite_ready_fn ready, void* user) {
  std::shared_ptr<hvdlite::core::Runtime> runtime;
  try {
    runtime = hvdlite::api::session().runtime();
  } catch (const hvdlite::InvalidArgument&) {
    return -1;  // not initialized, or shut down meanwhile
  }
  // One clock reading a pass (Note [One clock reading a cycle]).
  int32_t outcome = 0;
  bool drove = false;
  for (;;) {
    if (ready(user)) {
      outcome = 1;
      break;
    }
    if (!runtime->runCycleOnCaller(std::chrono::steady_clock::now())) break;
    drove = true;
  }
  // What is still in flight goes back to the background thread, which a
  // cycle run here left waiting (Runtime::releaseCycles).
  if (drove) runtime->releaseCycles();
  return outcome;
}
