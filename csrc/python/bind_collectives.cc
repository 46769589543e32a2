#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <chrono>
#include <string>

#include "api/request.h"
#include "common/errors.h"
#include "python/bind.h"
#include "python/errors.h"
#include "python/keyword_request.h"

namespace py = pybind11;

namespace hvdlite::python {
namespace {

// Hands a core-allocated output to NumPy without copying: the array's base
// owns the allocation.
py::object toArray(std::unique_ptr<uint8_t[]> bytes, size_t nbytes) {
  if (!bytes) return py::none();
  uint8_t* raw = bytes.release();  // now owned by the capsule
  py::capsule owner(raw, [](void* p) { delete[] static_cast<uint8_t*>(p); });
  return py::array_t<uint8_t>({static_cast<py::ssize_t>(nbytes)}, {1}, raw, owner);
}

struct DeviceOutput {
  core::DeviceMemory memory;
  size_t nbytes;
  int32_t device;
};

// Note [Keyword requests]
// enqueue takes api.h's request as keyword arguments, so that no caller can
// send a value to the wrong field by position. It is every gradient's path,
// and pybind11 looks up each declared keyword in a dict built per call
// (about 2 us on ~20 fields, measured), so enqueue is a plain
// METH_FASTCALL function: Python passes the keyword names as a tuple of
// interned strings, which keyword_request.cc matches by pointer, in the order
// hvdlite/common/requests.py passes them. The request then goes through the
// one checked builder (api/request.h) that the C API uses too.
PyObject* enqueue(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  KeywordRequest keywords;
  try {
    if (!parseKeywords(args, nargs, kwnames, keywords)) return nullptr;
    bool wake = !(keywords.request.flags & HVDLITE_REQUEST_NO_WAKE);
    int64_t handle = session().enqueue(api::buildEntry(keywords.request), wake);
    return PyLong_FromLongLong(handle);
  } catch (const Error& e) {
    setPythonError(e);
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

const char* enqueueDoc() {
  static const std::string doc =
      std::string("enqueue(*, op, name, ...) -> handle\n\nQueues one collective; keywords: ") +
      keywordList() + ". A bad code or argument raises ValueError before anything is queued.";
  return doc.c_str();
}

// Note [Interruptible waits]
// A wait can last (slow peers; a stall, until its shutdown time), and Python
// runs signal handlers only when the interpreter gets control back: a thread
// blocked in C++ would keep Ctrl-C and SIGALRM timeouts (pytest-timeout)
// waiting for the collective. So a wait comes back every kWaitSlice, without
// holding the GIL meanwhile, and runs the handlers. One that raises
// (KeyboardInterrupt, a timeout's exception) ends the wait: this rank stops
// collectives here and on every peer with a message naming it
// (Note [Aborting from a waiting thread] in core/runtime.cc), and the
// exception propagates. A short collective never reaches a slice's end, so
// this costs the latency path nothing.
constexpr auto kWaitSlice = std::chrono::milliseconds(100);

std::shared_ptr<Handle> waitInterruptibly(int64_t handle) {
  while (true) {
    std::shared_ptr<Handle> done;
    {
      py::gil_scoped_release release;
      done = session().wait(handle, std::chrono::steady_clock::now() + kWaitSlice);
    }
    if (done) return done;
    if (PyErr_CheckSignals() == 0) continue;
    py::error_already_set raised;  // the handler's exception
    std::string name = py::str(raised.type().attr("__name__"));
    {
      py::gil_scoped_release release;
      session().interrupt(handle, name);
    }
    throw raised;
  }
}

size_t byteCount(const std::vector<int64_t>& shape, size_t esize) {
  size_t n = esize;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

}  // namespace

void bindCollectives(py::module_& m) {
  static PyMethodDef enqueue_def = {
      "enqueue", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(enqueue)),
      METH_FASTCALL | METH_KEYWORDS, enqueueDoc()};
  m.attr("enqueue") = py::reinterpret_steal<py::object>(
      PyCFunction_NewEx(&enqueue_def, nullptr, m.attr("__name__").ptr()));

  // A CUDA output the core allocated: its address, and ownership (cudaFree
  // when the last reference, e.g. a framework tensor's, goes).
  py::class_<DeviceOutput>(m, "DeviceOutput")
      .def_property_readonly("data_ptr", [](const DeviceOutput& o) { return reinterpret_cast<uintptr_t>(o.memory.get()); })
      .def_readonly("nbytes", &DeviceOutput::nbytes)
      .def_readonly("device", &DeviceOutput::device);

  m.def("poll", [](int64_t handle) { return session().poll(handle); });

  // Returns (output bytes as a uint8 array or None, output shape, received splits, value).
  m.def("wait", [](int64_t handle, int dtype) {
    std::shared_ptr<Handle> h = waitInterruptibly(handle);
    if (!h->status.ok()) raiseStatus(h->status);
    size_t nbytes = byteCount(h->output_shape, dtypeSize(static_cast<DataType>(dtype)));
    py::object out = h->device_output ? py::cast(DeviceOutput{h->device_output, nbytes, h->device})
                                      : toArray(std::move(h->output), nbytes);
    return py::make_tuple(out, h->output_shape, h->received_splits, h->value);
  }, py::arg("handle"), py::arg("dtype") = 0);
}

}  // namespace hvdlite::python
