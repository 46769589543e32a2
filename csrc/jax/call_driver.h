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

// Instead of callQueued(), for a call that may complete on the calling
// thread (Note [A lone call drives itself] in call_driver.cc): true when it
// is the only call pending and the previous burst was one call; the caller
// then runs the cycles itself (hvdlite_drive_cycles), calls
// callCompletedHere() if its call completed there, and doneDrivingHere()
// once it stops, whether it completed or not.
bool driveHere();

// The call that drives here completed on this thread; it tells XLA itself.
void callCompletedHere();

// The thread that drove here stops: a driver takes over what is pending.
void doneDrivingHere();

// A counted call completed (on whichever thread ran the cycle): `report`,
// which tells XLA, runs soon on the driver's thread, never on the caller's.
void callCompleted(std::function<void()> report);

}  // namespace hvdlite::jax_ffi
