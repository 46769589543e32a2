// The call site of the Python code that submits a collective: the innermost
// frame of the user's program on the calling thread (Note [Call sites] in
// core/call_site.h; how it stays cheap: Note [Capturing a call site] in
// call_sites.cc).
#pragma once

#include <pybind11/pybind11.h>

#include "core/call_site.h"

namespace hvdlite::python {

// The interned site of the innermost frame on this thread whose code is not
// in a library directory (hvdlite's, the frameworks'); null when there is
// none or call sites are off. Call with the GIL held.
const core::CallSite* captureCallSite();

// call_site() -> (file, line, function) or None, for bindings that pass a
// site to an op they build (TensorFlow, JAX); set_call_site_libraries(dirs).
void bindCallSites(pybind11::module_& m);

}  // namespace hvdlite::python
