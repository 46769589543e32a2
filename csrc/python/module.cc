// hvdlite._core: the Python face of the C++ core. Framework-free: tensors
// arrive as (pointer, dtype, shape); the Python layers keep them alive.
#include <pybind11/pybind11.h>

#include "python/bind.h"
#include "python/call_sites.h"
#include "python/exceptions.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "hvdlite's C++ core: runtime, negotiation, fusion and transports";
  hvdlite::python::registerErrorTranslators(m);
  hvdlite::python::bindRuntime(m);
  hvdlite::python::bindCollectives(m);
  hvdlite::python::bindTorchCalls(m);
  hvdlite::python::bindHandleTable(m);
  hvdlite::python::bindCallSites(m);
  hvdlite::python::bindCodes(m);
}
