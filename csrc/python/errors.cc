#include "python/errors.h"

namespace py = pybind11;

namespace hvdlite::python {
namespace {

py::object internalErrorClass() {
  return py::module_::import("hvdlite.common.exceptions").attr("HvdliteInternalError");
}

[[noreturn]] void raise(py::object type, const std::string& message) {
  PyErr_SetString(type.ptr(), message.c_str());
  throw py::error_already_set();
}

}  // namespace

void registerErrorTranslators(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      setPythonError(e);
    }
  });
}

void setPythonError(const Error& error) {
  if (dynamic_cast<const InvalidArgument*>(&error)) {
    PyErr_SetString(PyExc_ValueError, error.what());
  } else {
    PyErr_SetString(internalErrorClass().ptr(), error.what());
  }
}

void raiseStatus(const core::Status& status) {
  if (status.kind == core::StatusKind::kInvalidArgument) {
    raise(py::reinterpret_borrow<py::object>(PyExc_ValueError), status.message);
  }
  raise(internalErrorClass(), status.message);
}

}  // namespace hvdlite::python
