#pragma once

#include <pybind11/pybind11.h>

#include "python/session.h"

namespace hvdlite::python {

// The module's one Session (its Runtime and handles), created on first use and
// destroyed, with a clean shutdown, at interpreter exit.
Session& session();

void bindRuntime(pybind11::module_& m);      // init, shutdown, topology, timeline, process sets
void bindCollectives(pybind11::module_& m);  // enqueue, poll, wait

}  // namespace hvdlite::python
