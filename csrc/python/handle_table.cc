// The handle table's common cases from C (Note [The handle table's common
// cases in C]).
#include "python/handle_table.h"

#include "python/bind.h"
#include "python/one_call.h"

namespace hvdlite::python {
namespace {

// Note [The handle table's common cases in C]
// hvdlite/common/handles.py's table stays the process's one handle table
// (a dict of handle -> (binding, entries, finish, payload) and a counter),
// but a step of many small gradients paid two of its Python frames per
// tensor besides the binding's own: table.add after the submission, and
// table.synchronize, whose wait() also built a result tuple (output, shape,
// splits, value) that an in-place result never reads. hvdlite.torch's
// allreduce_tensor_async therefore adds its entry from C, and
// synchronize_handle takes the common entry from C: one host operation
// whose result is already in the payload's output (finish is `written`). It
// pops the entry, waits as wait() does (interruptibly, raising the
// operation's failure), and returns the payload's output; any other entry,
// an unknown handle or another binding's goes to the table's own
// synchronize, unchanged, which says what is wrong. The table registers its
// dict, counter, `written` and synchronize once (set_handle_table), so both
// sides read and write the same entries, under the GIL as before.
struct TableRefs {
  PyObject* pending = nullptr;      // the table's dict, owned
  PyObject* ids = nullptr;          // its counter (an iterator of ints), owned
  PyObject* written = nullptr;      // collective_table.written, owned
  PyObject* synchronize = nullptr;  // the table's synchronize(handle, binding), owned
};

TableRefs& tableRefs() {
  static TableRefs refs;  // set once by the table; read under the GIL
  return refs;
}

// set_handle_table(pending, ids, written, synchronize)
PyObject* setHandleTable(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4 || !PyDict_CheckExact(args[0]) || !PyIter_Check(args[1]) || !PyCallable_Check(args[2]) ||
      !PyCallable_Check(args[3])) {
    PyErr_SetString(PyExc_TypeError, "set_handle_table(pending: dict, ids: iterator, written, synchronize)");
    return nullptr;
  }
  auto& refs = tableRefs();
  PyObject** fields[] = {&refs.pending, &refs.ids, &refs.written, &refs.synchronize};
  for (int i = 0; i < 4; ++i) {
    Py_INCREF(args[i]);
    Py_XSETREF(*fields[i], args[i]);
  }
  Py_RETURN_NONE;
}

// The core Handle of `entry` where it is one host operation's (Handle, dtype
// code); null otherwise.
Handle* hostOperation(PyObject* entries) {
  if (!PyTuple_CheckExact(entries) || PyTuple_GET_SIZE(entries) != 1) return nullptr;
  PyObject* entry = PyTuple_GET_ITEM(entries, 0);
  if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) return nullptr;
  return coreHandleOf(PyTuple_GET_ITEM(entry, 0));
}

// synchronize_handle(handle, binding) -> the result, as the table's synchronize.
PyObject* synchronizeHandle(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  auto& refs = tableRefs();
  if (nargs != 2 || !refs.pending) {
    PyErr_SetString(PyExc_TypeError, "synchronize_handle(handle, binding), after set_handle_table()");
    return nullptr;
  }
  PyObject* handle = args[0];
  PyObject* found = PyLong_CheckExact(handle) ? PyDict_GetItemWithError(refs.pending, handle) : nullptr;  // borrowed
  if (!found && PyErr_Occurred()) return nullptr;
  Handle* operation = nullptr;
  if (found && PyTuple_CheckExact(found) && PyTuple_GET_SIZE(found) == 4 && PyTuple_GET_ITEM(found, 0) == args[1] &&
      PyTuple_GET_ITEM(found, 2) == refs.written && PyTuple_CheckExact(PyTuple_GET_ITEM(found, 3)) &&
      PyTuple_GET_SIZE(PyTuple_GET_ITEM(found, 3)) == 2) {
    operation = hostOperation(PyTuple_GET_ITEM(found, 1));
  }
  if (!operation) return PyObject_Vectorcall(refs.synchronize, args, 2, nullptr);
  // Taken out of the table as the table's synchronize does, before the
  // wait; held here meanwhile, since the wait lets other threads run.
  Py_INCREF(found);
  if (PyDict_DelItem(refs.pending, handle) != 0) {
    Py_DECREF(found);
    return nullptr;
  }
  PyObject* result = raisingAsPython([&]() -> PyObject* {
    finishWait(*operation);
    PyObject* output = PyTuple_GET_ITEM(PyTuple_GET_ITEM(found, 3), 1);
    Py_INCREF(output);
    return output;
  });
  Py_DECREF(found);
  return result;
}

}  // namespace

PyObject* reserveHandle() {
  auto& refs = tableRefs();
  if (!refs.pending) {
    PyErr_SetString(PyExc_RuntimeError, "hvdlite._core: no handle table registered (set_handle_table)");
    return nullptr;
  }
  PyObject* handle = PyIter_Next(refs.ids);
  if (!handle && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "hvdlite._core: the handle counter ended");
  return handle;
}

bool addToHandleTable(PyObject* handle, PyObject* binding, PyObject* entries, PyObject* finish, PyObject* payload) {
  PyObject* value = PyTuple_Pack(4, binding, entries, finish, payload);
  if (!value) {
    Py_INCREF(entries);  // leaked with the buffers they name
    Py_INCREF(payload);
    return false;
  }
  // A failed insertion leaks `value`, and with it the payload.
  if (PyDict_SetItem(tableRefs().pending, handle, value) != 0) return false;
  Py_DECREF(value);
  return true;
}

PyObject* writtenFinish() { return tableRefs().written; }

void bindHandleTable(pybind11::module_& m) {
  // Both: Note [The handle table's common cases in C].
  addPlainFunction(m, "set_handle_table", setHandleTable,
      "set_handle_table(pending, ids, written, synchronize): the handle table's dict, counter, `written` "
      "finish and synchronize(handle, binding), for adding and taking its common entries from C.");
  addPlainFunction(m, "synchronize_handle", synchronizeHandle,
      "synchronize_handle(handle, binding) -> result: the table's synchronize, its common entry (one host "
      "operation, result in the caller's buffer) taken in C, any other through the table's own.");
}

}  // namespace hvdlite::python
