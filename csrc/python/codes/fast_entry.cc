// hvdlite._codes.FastEntry: a public collective that reaches the core's
// one-call entry without a Python frame, else its Python definition.
//
// Note [A public collective without a Python frame]
// hvdlite.numpy.allreduce_ and hvdlite.torch.allreduce_ are Python functions
// whose only work on the common path is one call of the core's fast entry
// (requests.allreduce_array, core_calls.tensor_call): the frame itself, its
// defaults, global reads and the call with 7-10 arguments cost 600-1,500
// instructions per 4-byte collective (callgrind), as much as the entry's own
// work. A FastEntry does the same in C: it maps the positional and keyword
// arguments onto the Python function's parameters (reading its __code__ and
// __defaults__, so the def stays the one definition), fills the name of an
// unnamed call as the def does (`name or auto_name(kind)`), and calls the
// entry. When the arguments do not map (too many, unknown, repeated,
// missing), the Python function runs with them, so its TypeError is the
// error; when the entry declines (returns None), the general path runs
// (Note [Declined without asking twice]) with the name already made, so an
// unnamed call is numbered once.
// It lives in hvdlite._codes, not the core, because importing hvdlite must not
// load the core (Note [MPI at run time]); the entry is read from its module
// on every call, from the module's dict (bound there on first use, Note
// [Core entry points bound once]), so a replaced entry is seen as callers of
// `module.entry` see it. Everything a reader of the function asks for
// (__doc__, __name__, __qualname__, __module__, __wrapped__, and anything
// else through attribute look-up) is the Python function's, so
// inspect.signature, help() and mkdocs see the def; it binds as a method
// the way a function does, and pickles by reference (its qualified name).
//
// Note [Declined without asking twice]
// The def asks the entry itself first (it is also the path of callers that
// reach it directly, through __wrapped__), so running the
// def after the entry declined asked the entry twice: every declined call
// (CUDA, non-contiguous, requires grad, average=...) read its tensor and
// judged its arguments again, to the same None. So a FastEntry can be given
// what the def runs after its entry declines, the def's tail (the general
// path's function, hvdlite/torch/collectives.py's _allreduce_now ...), with
// its arguments mapped from the def's parameters as the entry's are
// (constants or parameters, in any order), and runs that instead; without
// one it runs the def, as before.
#include <Python.h>
#include <structmember.h>

#include <algorithm>

#include <pybind11/pybind11.h>

#include "python/bind.h"

namespace hvdlite::python {
namespace {

constexpr Py_ssize_t kMostParameters = 16;
constexpr Py_ssize_t kMostArguments = kMostParameters + 4;

// The arguments of a call made from the def's parameters: each is a
// parameter or a constant. A call copies `arguments` (the constants, read
// from the tuple once) and writes the parameters into their places.
struct ArgumentMap {
  PyObject* constants = nullptr;  // tuple: the constant where an argument is one, else None
  Py_ssize_t count = 0;
  PyObject* arguments[kMostArguments];  // borrowed from `constants`
  Py_ssize_t parameter_count = 0;
  Py_ssize_t places[kMostArguments];      // where each parameter goes among the arguments
  Py_ssize_t parameters[kMostArguments];  // and which parameter it is
};

struct FastEntry {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* general;         // the Python function: the definition and the general path
  PyObject* entry_module;    // where the fast entry is bound, and its attribute's name
  PyObject* entry_name;
  PyObject* entry_dict;      // entry_module's __dict__
  ArgumentMap entry_arguments;
  PyObject* declined;        // what runs when the entry declines (the def's tail), or null: the def
  ArgumentMap declined_arguments;
  PyObject* parameter_names; // tuple of str, the function's positional parameters
  PyObject* defaults;        // tuple, the function's __defaults__ (the last parameters')
  Py_ssize_t name_index;     // the parameter named as the def names it, or -1
  PyObject* name_maker;      // auto_name, called with name_kind, or nullptr
  PyObject* name_kind;
};

PyTypeObject* fast_entry_type = nullptr;

// Calls `function` with the arguments `map` makes of the mapped parameters.
PyObject* callMapped(PyObject* function, const ArgumentMap& map, PyObject* const* values) {
  PyObject* arguments[kMostArguments];
  std::copy(map.arguments, map.arguments + map.count, arguments);
  for (Py_ssize_t p = 0; p < map.parameter_count; ++p) arguments[map.places[p]] = values[map.parameters[p]];
  return PyObject_Vectorcall(function, arguments, map.count, nullptr);
}

// What runs when the entry declines, with the mapped parameters (the name
// made): the def's tail where one was given, which does not ask the entry
// again (Note [Declined without asking twice]), else the def.
PyObject* callDeclined(FastEntry* self, PyObject* const* values) {
  if (self->declined) return callMapped(self->declined, self->declined_arguments, values);
  return PyObject_Vectorcall(self->general, values, PyTuple_GET_SIZE(self->parameter_names), nullptr);
}

// The parameter of a keyword argument, or -1.
Py_ssize_t parameterOf(FastEntry* self, PyObject* keyword) {
  Py_ssize_t count = PyTuple_GET_SIZE(self->parameter_names);
  for (Py_ssize_t i = 0; i < count; ++i) {  // interned names: identity first
    if (PyTuple_GET_ITEM(self->parameter_names, i) == keyword) return i;
  }
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (PyUnicode_Compare(PyTuple_GET_ITEM(self->parameter_names, i), keyword) == 0) return i;
  }
  return -1;
}

PyObject* callFastEntry(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<FastEntry*>(callable);
  Py_ssize_t positional = PyVectorcall_NARGS(nargsf);
  Py_ssize_t parameters = PyTuple_GET_SIZE(self->parameter_names);
  Py_ssize_t keywords = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  PyObject* values[kMostParameters];
  bool maps = positional <= parameters;
  for (Py_ssize_t i = positional; i < parameters; ++i) values[i] = nullptr;
  for (Py_ssize_t i = 0; maps && i < positional; ++i) values[i] = args[i];
  for (Py_ssize_t k = 0; maps && k < keywords; ++k) {
    Py_ssize_t index = parameterOf(self, PyTuple_GET_ITEM(kwnames, k));
    maps = index >= 0 && values[index] == nullptr;
    if (maps) values[index] = args[positional + k];
  }
  Py_ssize_t first_default = parameters - PyTuple_GET_SIZE(self->defaults);
  for (Py_ssize_t i = 0; maps && i < parameters; ++i) {
    if (values[i]) continue;
    maps = i >= first_default;
    if (maps) values[i] = PyTuple_GET_ITEM(self->defaults, i - first_default);
  }
  // The def's own TypeError for arguments that do not map.
  if (!maps) return PyObject_Vectorcall(self->general, args, nargsf, kwnames);

  PyObject* made_name = nullptr;  // `name = name or auto_name(kind)`, as the def does
  if (self->name_index >= 0) {
    PyObject* name = values[self->name_index];  // a str or None, nearly always: no call for those
    int named = PyUnicode_CheckExact(name) ? PyUnicode_GET_LENGTH(name) != 0
                                           : name == Py_None ? 0 : PyObject_IsTrue(name);
    if (named < 0) return nullptr;
    if (!named) {
      made_name = PyObject_CallOneArg(self->name_maker, self->name_kind);
      if (!made_name) return nullptr;
      values[self->name_index] = made_name;
    }
  }
  // Read from the module's dict on every call, as `module.entry` is, so a
  // replaced entry (a test's counter) is seen; the module's __getattr__ binds
  // it on the first.
  PyObject* entry = PyDict_GetItemWithError(self->entry_dict, self->entry_name);  // borrowed
  PyObject* bound = nullptr;
  if (!entry) {
    entry = bound = PyErr_Occurred() ? nullptr : PyObject_GetAttr(self->entry_module, self->entry_name);
    if (!entry) {
      Py_XDECREF(made_name);
      return nullptr;
    }
  }
  Py_INCREF(entry);  // the entry may replace itself in the dict during the call
  PyObject* result = callMapped(entry, self->entry_arguments, values);
  Py_DECREF(entry);
  Py_XDECREF(bound);
  if (result == Py_None) {
    Py_DECREF(result);
    result = callDeclined(self, values);
  }
  Py_XDECREF(made_name);
  return result;
}

// Reads an ArgumentMap from `slots` (tuple of int: a parameter's index, or
// -1 for the constant at the same place in `constants`); false with a Python
// error set.
bool readArgumentMap(PyObject* slots, PyObject* constants, Py_ssize_t parameters, ArgumentMap& map) {
  map.count = PyTuple_GET_SIZE(slots);
  if (map.count > kMostArguments || PyTuple_GET_SIZE(constants) != map.count) {
    PyErr_SetString(PyExc_ValueError, "FastEntry: at most 20 arguments, as many slots as constants");
    return false;
  }
  map.parameter_count = 0;
  for (Py_ssize_t i = 0; i < map.count; ++i) {
    const Py_ssize_t slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, i));
    if (slot < -1 || slot >= parameters) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "FastEntry: a slot names no parameter");
      return false;
    }
    map.arguments[i] = PyTuple_GET_ITEM(constants, i);  // None where a parameter goes
    if (slot < 0) continue;
    map.places[map.parameter_count] = i;
    map.parameters[map.parameter_count++] = slot;
  }
  map.constants = Py_NewRef(constants);  // keeps `arguments` alive
  return true;
}

// FastEntry(general, entry_module, entry_name, entry_slots, entry_constants,
//           declined, declined_slots, declined_constants, name_index,
//           name_maker, name_kind); declined None: the def runs instead.
PyObject* newFastEntry(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *general, *entry_module, *entry_name, *entry_slots, *entry_constants, *declined,
      *declined_slots, *declined_constants, *name_maker, *name_kind;
  Py_ssize_t name_index;
  if (!PyArg_ParseTuple(args, "OOUO!O!OO!O!nOO:FastEntry", &general, &entry_module, &entry_name,
                        &PyTuple_Type, &entry_slots, &PyTuple_Type, &entry_constants, &declined,
                        &PyTuple_Type, &declined_slots, &PyTuple_Type, &declined_constants,
                        &name_index, &name_maker, &name_kind)) {
    return nullptr;
  }
  if (!PyFunction_Check(general) || (declined != Py_None && !PyCallable_Check(declined))) {
    PyErr_SetString(PyExc_TypeError,
                    "FastEntry: the general path must be a Python function, and declined callable or None");
    return nullptr;
  }
  auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(general));
  Py_ssize_t parameters = code->co_argcount;
  PyObject* defaults = PyFunction_GET_DEFAULTS(general);
  if (parameters > kMostParameters || code->co_kwonlyargcount != 0 ||
      (code->co_flags & (CO_VARARGS | CO_VARKEYWORDS)) || name_index >= parameters) {
    PyErr_SetString(PyExc_ValueError,
                    "FastEntry: the function must have at most 16 positional parameters and nothing else");
    return nullptr;
  }
  PyObject* names = PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_varnames");
  if (!names) return nullptr;
  PyObject* parameter_names = PyTuple_GetSlice(names, 0, parameters);
  Py_DECREF(names);
  if (!parameter_names) return nullptr;
  auto* self = reinterpret_cast<FastEntry*>(type->tp_alloc(type, 0));
  if (!self) {
    Py_DECREF(parameter_names);
    return nullptr;
  }
  self->vectorcall = callFastEntry;
  self->parameter_names = parameter_names;
  self->general = Py_NewRef(general);
  self->entry_module = Py_NewRef(entry_module);
  self->entry_name = Py_NewRef(entry_name);
  self->defaults = defaults ? Py_NewRef(defaults) : PyTuple_New(0);
  self->name_index = name_index;
  self->name_maker = Py_NewRef(name_maker);
  self->name_kind = Py_NewRef(name_kind);
  self->declined = declined == Py_None ? nullptr : Py_NewRef(declined);
  self->entry_dict = PyObject_GetAttrString(entry_module, "__dict__");
  if (!self->entry_dict || !PyDict_Check(self->entry_dict)) {
    Py_DECREF(self);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "FastEntry: the entry's module has no dict");
    return nullptr;
  }
  if (!self->defaults || !readArgumentMap(entry_slots, entry_constants, parameters, self->entry_arguments) ||
      !readArgumentMap(declined_slots, declined_constants, parameters, self->declined_arguments)) {
    Py_DECREF(self);
    return nullptr;
  }
  return reinterpret_cast<PyObject*>(self);
}

int traverseFastEntry(PyObject* object, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<FastEntry*>(object);
  Py_VISIT(Py_TYPE(object));
  Py_VISIT(self->general);
  Py_VISIT(self->entry_module);
  Py_VISIT(self->entry_dict);
  Py_VISIT(self->entry_arguments.constants);
  Py_VISIT(self->declined);
  Py_VISIT(self->declined_arguments.constants);
  Py_VISIT(self->name_maker);
  return 0;
}

int clearFastEntry(PyObject* object) {
  auto* self = reinterpret_cast<FastEntry*>(object);
  Py_CLEAR(self->general);
  Py_CLEAR(self->entry_module);
  Py_CLEAR(self->entry_name);
  Py_CLEAR(self->entry_dict);
  Py_CLEAR(self->entry_arguments.constants);
  Py_CLEAR(self->declined);
  Py_CLEAR(self->declined_arguments.constants);
  Py_CLEAR(self->parameter_names);
  Py_CLEAR(self->defaults);
  Py_CLEAR(self->name_maker);
  Py_CLEAR(self->name_kind);
  return 0;
}

void deallocFastEntry(PyObject* object) {
  PyTypeObject* type = Py_TYPE(object);
  PyObject_GC_UnTrack(object);
  clearFastEntry(object);
  type->tp_free(object);
  Py_DECREF(type);
}

// What is not the FastEntry's own is the Python function's (__defaults__,
// __code__, __annotations__, __dict__'s entries ...).
PyObject* getAttribute(PyObject* object, PyObject* name) {
  PyObject* found = PyObject_GenericGetAttr(object, name);
  if (found || !PyErr_ExceptionMatches(PyExc_AttributeError)) return found;
  PyErr_Clear();
  return PyObject_GetAttr(reinterpret_cast<FastEntry*>(object)->general, name);
}

// The type's own __doc__ and __module__ would hide the function's.
PyObject* generalAttribute(PyObject* object, void* name) {
  return PyObject_GetAttrString(reinterpret_cast<FastEntry*>(object)->general,
                                static_cast<const char*>(name));
}

PyObject* wrapped(PyObject* object, void*) {
  return Py_NewRef(reinterpret_cast<FastEntry*>(object)->general);
}

PyObject* repr(PyObject* object) { return PyObject_Repr(reinterpret_cast<FastEntry*>(object)->general); }

// Bound as a method, as a function is.
PyObject* bind(PyObject* object, PyObject* instance, PyObject*) {
  if (!instance || instance == Py_None) return Py_NewRef(object);
  return PyMethod_New(object, instance);
}

// By reference, as a function pickles: its module's attribute of this name.
PyObject* reduce(PyObject* object, PyObject*) {
  return PyObject_GetAttrString(reinterpret_cast<FastEntry*>(object)->general, "__qualname__");
}

}  // namespace

void registerFastEntryType(pybind11::module_& m) {
  static PyGetSetDef getset[] = {
      {"__doc__", generalAttribute, nullptr, nullptr, const_cast<char*>("__doc__")},
      {"__name__", generalAttribute, nullptr, nullptr, const_cast<char*>("__name__")},
      {"__qualname__", generalAttribute, nullptr, nullptr, const_cast<char*>("__qualname__")},
      {"__module__", generalAttribute, nullptr, nullptr, const_cast<char*>("__module__")},
      {"__wrapped__", wrapped, nullptr, nullptr, nullptr},
      {nullptr, nullptr, nullptr, nullptr, nullptr}};
  static PyMemberDef members[] = {
      {"__vectorcalloffset__", T_PYSSIZET, offsetof(FastEntry, vectorcall), READONLY, nullptr},
      {nullptr, 0, 0, 0, nullptr}};
  static PyMethodDef methods[] = {{"__reduce__", reduce, METH_NOARGS, nullptr},
                                  {nullptr, nullptr, 0, nullptr}};
  static PyType_Slot slots[] = {
      {Py_tp_new, reinterpret_cast<void*>(newFastEntry)},
      {Py_tp_dealloc, reinterpret_cast<void*>(deallocFastEntry)},
      {Py_tp_traverse, reinterpret_cast<void*>(traverseFastEntry)},
      {Py_tp_clear, reinterpret_cast<void*>(clearFastEntry)},
      {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
      {Py_tp_getattro, reinterpret_cast<void*>(getAttribute)},
      {Py_tp_descr_get, reinterpret_cast<void*>(bind)},
      {Py_tp_repr, reinterpret_cast<void*>(repr)},
      {Py_tp_getset, getset},
      {Py_tp_members, members},
      {Py_tp_methods, methods},
      {0, nullptr}};
  static PyType_Spec spec = {
      "hvdlite._codes.FastEntry", sizeof(FastEntry), 0,
      Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL, slots};
  fast_entry_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&spec));
  if (!fast_entry_type) throw pybind11::error_already_set();
  m.attr("FastEntry") = pybind11::reinterpret_borrow<pybind11::object>(
      reinterpret_cast<PyObject*>(fast_entry_type));
}

}  // namespace hvdlite::python
