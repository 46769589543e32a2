// hvdlite._codes: api.h's codes alone, without the core, so that importing
// hvdlite (the launcher, pure-Python parts) builds its enums without loading
// libhvdlite and the MPI library it links. hvdlite._core exports the same.
#include <pybind11/pybind11.h>

#include "python/bind.h"

PYBIND11_MODULE(_codes, m) {
  m.doc() = "hvdlite's op, reduce-op and dtype codes (csrc/api/api.h)";
  hvdlite::python::bindCodes(m);
  hvdlite::python::registerFastEntryType(m);  // Note [A public collective without a Python frame]
}
