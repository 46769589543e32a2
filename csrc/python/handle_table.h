// The common cases of hvdlite/common/handles.py's table, from C: adding a
// host operation that an *_async one-call function submitted, and
// synchronizing one whose result is already in the caller's buffer (Note
// [The handle table's common cases in C] in handle_table.cc).
#pragma once

#include <Python.h>

namespace hvdlite::python {

// The next handle number of the table (a new reference), for an entry the
// caller adds with addToHandleTable once it has submitted; null with a Python
// error set, also when no table was registered.
PyObject* reserveHandle();

// Adds (binding, entries, finish, payload) to the table under `handle` (from
// reserveHandle); borrows its arguments, which the table holds from then on.
// False with a Python error set: then the entry is kept alive anyway (leaked),
// since the core may be writing into the payload's buffers.
bool addToHandleTable(PyObject* handle, PyObject* binding, PyObject* entries, PyObject* finish, PyObject* payload);

// The table's `written` finish (hvdlite/common/collective_table.py), once
// registered; null before.
PyObject* writtenFinish();

}  // namespace hvdlite::python
