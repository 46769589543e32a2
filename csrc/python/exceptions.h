#pragma once

#include <pybind11/pybind11.h>

#include "common/errors.h"
#include "core/status.h"

namespace hvdlite::python {

// Maps core exceptions to hvdlite.common.exceptions: InvalidArgument ->
// ValueError; every other hvdlite error -> HvdliteInternalError or the
// subclass its kind names (core/status.h), with its details as fields.
void registerErrorTranslators(pybind11::module_& m);

// Sets the Python exception for `error` as the translators do, for functions
// that bypass pybind11's dispatch (enqueue: Note [Keyword requests]).
void setPythonError(const Error& error);

// The Python exception for a failed status: its class, message and fields
// (call with the GIL held).
pybind11::object makeException(const core::Status& status);

// Raises makeException(status) (call with the GIL held).
[[noreturn]] void raiseStatus(const core::Status& status);

}  // namespace hvdlite::python
