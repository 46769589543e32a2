// Where the CPU handler's asynchronous calls are driven and reported
// complete to XLA (Note [Driving a step's calls] in call_driver.cc).
#pragma once

#include <functional>

namespace hvdlite::jax_ffi {

// Runs `task` soon on one of hvdlite.jax's completion threads, never on the
// caller's. Completing an XLA future runs the rest of the step on the
// completing thread, which may block (an io_callback waiting for its own
// collective): so the core's background thread must not be that thread, and
// a busy completion thread never delays the next task, which then gets a new
// thread. Idle threads sleep; in practice there are one or two.
void runOnCompletionThread(std::function<void()> task);

}  // namespace hvdlite::jax_ffi
