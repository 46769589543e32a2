// Who runs the cycles that complete the CPU handler's asynchronous calls,
// and where XLA is told (Note [Driving a step's calls] in call_driver.cc).
#pragma once

#include <functional>

namespace hvdlite::jax_ffi {

// Before a call queues its requests (with HVDLITE_REQUEST_NO_WAKE: the
// driver runs the cycle, not the background thread): counts it as pending,
// so that a completion that comes before callQueued() finds it counted.
void callStarting();

// Once the call has queued every request: counts it for the settle wait and
// makes sure a driver is on its way (Note [A call counts once queued]).
void callQueued();

// A counted call completed (on whichever thread ran the cycle): `report`,
// which tells XLA, runs soon on the driver's thread, never on the caller's.
void callCompleted(std::function<void()> report);

}  // namespace hvdlite::jax_ffi
