// What the one-call paths share (Note [One call for a synchronous
// collective] in bind_collectives.cc): plain METH_FASTCALL functions that
// judge the user's arguments themselves, submit, and wait on the calling
// thread. hvdlite.numpy's allreduce_array lives in bind_collectives.cc,
// hvdlite.torch's tensor calls in torch_one_call.cc.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>

#include "common/errors.h"
#include "python/bind.h"
#include "python/exceptions.h"

namespace hvdlite::python {

// What a plain METH_FASTCALL function (no pybind11 wrapper to translate for
// it) returns when `body` throws: nullptr, with the Python exception set.
template <typename Body>
PyObject* raisingAsPython(Body body) {
  try {
    return body();
  } catch (const Error& e) {
    setPythonError(e);
  } catch (pybind11::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// The two signatures of a METH_FASTCALL function (Python's own names for
// them are private before 3.13).
using FastFunction = PyObject* (*)(PyObject*, PyObject* const*, Py_ssize_t);
using FastKeywordsFunction = PyObject* (*)(PyObject*, PyObject* const*, Py_ssize_t, PyObject*);

// Adds `function` to `m` as a plain builtin, without pybind11's wrapper (its
// argument casting is what the one-call paths exist to skip): METH_FASTCALL,
// with METH_KEYWORDS for the four-argument form. The PyMethodDef lives as long
// as the process, since the function object points to it; `name` and `doc`
// must too (literals).
inline void addPlainFunction(pybind11::module_& m, const char* name, FastFunction function, const char* doc,
                             int flags = METH_FASTCALL) {
  auto* def = new PyMethodDef{name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(function)), flags, doc};
  PyObject* added = PyCFunction_NewEx(def, nullptr, m.attr("__name__").ptr());
  if (!added) throw pybind11::error_already_set();
  m.attr(name) = pybind11::reinterpret_steal<pybind11::object>(added);
}
inline void addPlainFunction(pybind11::module_& m, const char* name, FastKeywordsFunction function,
                             const char* doc) {
  addPlainFunction(m, name, reinterpret_cast<FastFunction>(reinterpret_cast<void (*)()>(function)), doc,
                   METH_FASTCALL | METH_KEYWORDS);
}

// Submits `request` with no wake-up for the background thread (the caller
// waits next and runs the cycles); throws what submit() refuses.
std::shared_ptr<Handle> submitOnly(hvdlite_request& request);
// Submits `request` (waking the background thread) for a caller that keeps
// the result in the handle table (hvdlite/common/handles.py) until
// synchronize(): returns its core entry, (hvdlite._core.Handle, dtype code),
// a new reference, or null with a Python error set (then nothing was
// submitted); throws what submit() refuses. Nothing fails once submitted.
PyObject* submitForTable(hvdlite_request& request);
// Waits for a handle submitOnly() returned (Note [Interruptible waits]);
// throws its failure. CUDA: the submitting stream waits for the result.
void finishWait(Handle& handle);
// Both: returns the operation's value.
int64_t submitAndWait(hvdlite_request& request);
// Note [Interruptible waits] in bind_collectives.cc.
void waitInterruptibly(Handle& handle);
// The Handle an hvdlite._core.Handle object holds (Note [Handles as plain
// objects]); null for any other object.
Handle* coreHandleOf(PyObject* object);

// A core-allocated output as a NumPy uint8 array that owns it (no copy);
// None for no bytes.
pybind11::object toArray(std::unique_ptr<uint8_t[]> bytes, size_t nbytes);

// The plain arguments of a one-call collective; `name` points into the
// caller's str.
struct PlainReduction {
  const char* name = nullptr;
  int32_t reduce_op = HVDLITE_REDUCE_AVERAGE;
  int32_t process_set_id = 0;
  double prescale = 1.0;
  double postscale = 1.0;
};

enum class Plainness { kPlain, kForPython, kFailed };

// What a one-call function returns when its arguments are not plain: None (a
// new reference), having done nothing, for the Python path to decide; null
// where judging them failed (the Python error is set).
inline PyObject* notPlainResult(Plainness judged) {
  if (judged == Plainness::kFailed) return nullptr;
  Py_RETURN_NONE;
}

// Whether a reduction's arguments, as the user gave them, are ones the core
// can take without the Python path's checks (no average=, a plain int op
// below Adasum, float scales, and plainTarget's); kFailed with a Python
// error set.
Plainness plainReduction(PyObject* name, PyObject* op, PyObject* prescale, PyObject* postscale,
                         PyObject* process_set, PyObject* average, PlainReduction& plain);
// The same for the name (a non-empty str without NUL) and the process set
// (one with a registered id) alone.
Plainness plainTarget(PyObject* name, PyObject* process_set, PlainReduction& plain);

// The request of `op` (allreduce, broadcast or allgather) from `input` into
// `output` with the plain arguments; the reduction's only for allreduce, the
// others keep the defaults, as on the general path. Inline: every one-call
// submission builds one.
inline hvdlite_request plainRequest(int32_t op, const PlainReduction& plain, void* input, void* output,
                                    int32_t dtype, const int64_t* shape, int32_t ndim) {
  hvdlite_request request = hvdlite_request_defaults();
  request.op = op;
  request.name = plain.name;
  request.process_set_id = plain.process_set_id;
  request.input = input;
  request.output = output;
  request.dtype = dtype;
  request.shape = shape;
  request.ndim = ndim;
  if (op == HVDLITE_OP_ALLREDUCE) {
    request.reduce_op = plain.reduce_op;
    request.prescale = plain.prescale;
    request.postscale = plain.postscale;
  }
  return request;
}
// Reduces `data` in place on this thread and returns `result` (a new
// reference); null with a Python error set.
PyObject* allreduceInPlace(PyObject* result, const PlainReduction& plain, void* data, int32_t dtype,
                           const int64_t* shape, int32_t ndim);

}  // namespace hvdlite::python
