#pragma once

#include <pybind11/pybind11.h>

#include "common/errors.h"
#include "core/status.h"

namespace hvdlite::python {

// Maps core exceptions to hvdlite.common.exceptions: InvalidArgument ->
// ValueError, every other hvdlite error -> HvdliteInternalError.
void registerErrorTranslators(pybind11::module_& m);

// Sets the Python exception for `error` as the translators do, for functions
// that bypass pybind11's dispatch (enqueue: Note [Keyword requests]).
void setPythonError(const Error& error);

// Raises the Python exception for a failed status (call with the GIL held).
[[noreturn]] void raiseStatus(const core::Status& status);

}  // namespace hvdlite::python
