#include "python/exceptions.h"

#include "api/session.h"

namespace py = pybind11;

namespace hvdlite::python {
namespace {

py::module_ exceptions() { return py::module_::import("hvdlite.common.exceptions"); }

// The class of hvdlite.common.exceptions a failure of this kind becomes.
const char* className(const core::Status& status) {
  switch (status.kind) {
    case core::StatusKind::kPrecondition: return "CollectiveMismatchError";
    case core::StatusKind::kDivergence: return "DivergenceError";
    case core::StatusKind::kOutsideRun: return "CollectiveOutsideRunError";
    case core::StatusKind::kTimeout: return "StallTimeoutError";
    case core::StatusKind::kShutdown: return "ShutdownError";
    case core::StatusKind::kTransport:
      return status.details && !status.details->ranks.empty() ? "PeerLostError" : "HvdliteInternalError";
    default: return "HvdliteInternalError";
  }
}

py::tuple ints(const std::vector<int32_t>& values) {
  py::tuple out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return out;
}

py::tuple strings(const std::vector<std::string>& values) {
  py::tuple out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return out;
}

// The keyword arguments of the exception's constructor: its fields.
py::dict fields(const core::ErrorDetails& d) {
  py::dict out;
  out["tensor_names"] = strings(d.tensor_names);
  out["ranks"] = ints(d.ranks);
  out["missing_ranks"] = ints(d.missing_ranks);
  out["hosts"] = strings(d.hosts);
  out["lost_hosts"] = strings(d.lost_hosts);
  out["field"] = d.field;
  py::tuple calls(d.calls.size());
  for (size_t i = 0; i < d.calls.size(); ++i) {
    const auto& c = d.calls[i];
    py::object site = c.site.known() ? py::object(py::make_tuple(c.site.file, c.site.line, c.site.function))
                                     : py::object(py::none());
    calls[i] = py::make_tuple(c.rank, c.tensor, c.op, site, c.value, c.blocked);
  }
  out["calls"] = calls;
  return out;
}

[[noreturn]] void raise(py::object exception) {
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
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

py::object makeException(const core::Status& status) {
  if (status.kind == core::StatusKind::kInvalidArgument) {
    return py::reinterpret_borrow<py::object>(PyExc_ValueError)(status.message);
  }
  py::object cls = exceptions().attr(className(status));
  // CollectiveOutsideRunError is no HvdliteInternalError: it has no fields.
  if (!status.details || status.kind == core::StatusKind::kOutsideRun) return cls(status.message);
  return cls(status.message, **fields(*status.details));
}

void setPythonError(const Error& error) {
  core::Status status;
  if (const auto* failed = dynamic_cast<const core::StatusError*>(&error)) {
    status = failed->status();
  } else if (const auto* lost = dynamic_cast<const PeerLost*>(&error)) {
    auto details = std::make_shared<core::ErrorDetails>();
    details->ranks = {lost->peerRank()};
    status = core::Status::Error(core::StatusKind::kTransport, error.what(), details);
  } else if (dynamic_cast<const InvalidArgument*>(&error)) {
    status = core::Status::Error(core::StatusKind::kInvalidArgument, error.what());
  } else {
    status = core::Status::Error(core::StatusKind::kCollective, error.what());
  }
  api::session().rememberFailure(status);  // Note [Failures by message] in api/session.h
  try {
    py::object exception = makeException(status);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
  } catch (py::error_already_set& e) {
    e.restore();  // hvdlite.common.exceptions failed to import: that error, then
  }
}

void raiseStatus(const core::Status& status) {
  api::session().rememberFailure(status);  // Note [Failures by message] in api/session.h
  raise(makeException(status));
}

}  // namespace hvdlite::python
