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

// Whether a reduction's arguments, as the user gave them, are ones the core
// can take without the Python path's checks (no average=, a plain int op
// below Adasum, float scales, and plainTarget's); kFailed with a Python
// error set.
Plainness plainReduction(PyObject* name, PyObject* op, PyObject* prescale, PyObject* postscale,
                         PyObject* process_set, PyObject* average, PlainReduction& plain);
// The same for the name (a non-empty str without NUL) and the process set
// (one with a registered id) alone.
Plainness plainTarget(PyObject* name, PyObject* process_set, PlainReduction& plain);

// The allreduce of `data` in place with the plain arguments.
hvdlite_request inPlaceAllreduce(const PlainReduction& plain, void* data, int32_t dtype, const int64_t* shape,
                                 int32_t ndim);
// Reduces `data` in place on this thread and returns `result` (a new
// reference); null with a Python error set.
PyObject* allreduceInPlace(PyObject* result, const PlainReduction& plain, void* data, int32_t dtype,
                           const int64_t* shape, int32_t ndim);

}  // namespace hvdlite::python
