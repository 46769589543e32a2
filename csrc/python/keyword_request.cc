#include "python/keyword_request.h"

#include <pybind11/numpy.h>

#include <climits>
#include <cstring>
#include <iterator>
#include <string>

namespace py = pybind11;

namespace hvdlite::python {
namespace {

// Each setter converts one keyword's value into the request; false with a
// Python exception set when it cannot.
using Setter = bool (*)(KeywordRequest& out, const char* field, PyObject* value);

bool typeError(const char* field, const char* expected, PyObject* value) {
  PyErr_Format(PyExc_TypeError, "enqueue(): %s must be %s, not %.100s", field, expected,
               Py_TYPE(value)->tp_name);
  return false;
}

// Python ints, IntEnums and NumPy integers (through __index__).
bool toInt64(const char* field, PyObject* value, long long& out) {
  out = PyLong_AsLongLong(value);
  if (out != -1 || !PyErr_Occurred()) return true;
  if (PyErr_ExceptionMatches(PyExc_TypeError)) {
    PyErr_Clear();
    return typeError(field, "an int", value);
  }
  PyErr_Clear();
  PyErr_Format(PyExc_ValueError, "enqueue(): %s %R does not fit in 64 bits", field, value);
  return false;
}

template <int32_t hvdlite_request::*Field>
bool setInt32(KeywordRequest& out, const char* field, PyObject* value) {
  long long v;
  if (!toInt64(field, value, v)) return false;
  if (v < INT32_MIN || v > INT32_MAX) {
    PyErr_Format(PyExc_ValueError, "enqueue(): %s %lld does not fit in 32 bits", field, v);
    return false;
  }
  out.request.*Field = static_cast<int32_t>(v);
  return true;
}

template <int64_t hvdlite_request::*Field>
bool setInt64(KeywordRequest& out, const char* field, PyObject* value) {
  long long v;
  if (!toInt64(field, value, v)) return false;
  out.request.*Field = static_cast<int64_t>(v);
  return true;
}

template <double hvdlite_request::*Field>
bool setDouble(KeywordRequest& out, const char* field, PyObject* value) {
  double v = PyFloat_AsDouble(value);
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return typeError(field, "a number", value);
  }
  out.request.*Field = v;
  return true;
}

template <const char* hvdlite_request::*Field>
bool setString(KeywordRequest& out, const char* field, PyObject* value) {
  if (!PyUnicode_Check(value)) return typeError(field, "a str", value);
  Py_ssize_t size;
  const char* utf8 = PyUnicode_AsUTF8AndSize(value, &size);  // owned by `value`
  if (!utf8) return false;
  if (std::strlen(utf8) != static_cast<size_t>(size)) {
    PyErr_Format(PyExc_ValueError, "enqueue(): %s %R contains a NUL character", field, value);
    return false;
  }
  out.request.*Field = utf8;
  return true;
}

// A buffer's address: an int (a framework tensor's data_ptr(), a CUDA event
// or stream), a NumPy array (cheaper than array.ctypes.data, which costs
// microseconds per call) or None.
template <typename Pointer, Pointer hvdlite_request::*Field>
bool setAddress(KeywordRequest& out, const char* field, PyObject* value) {
  void* address = nullptr;
  if (PyLong_Check(value)) {
    address = PyLong_AsVoidPtr(value);
    if (!address && PyErr_Occurred()) return false;
  } else if (py::isinstance<py::array>(value)) {
    address = const_cast<void*>(py::reinterpret_borrow<py::array>(value).data());
  } else if (value != Py_None) {
    return typeError(field, "an address (int), a NumPy array or None", value);
  }
  out.request.*Field = static_cast<Pointer>(address);
  return true;
}

// A sequence of ints (a tuple, torch.Size, list or 1-D array) into `Storage`,
// which the request's (Data, Count) pair then points at.
template <std::vector<int64_t> KeywordRequest::*Storage, const int64_t* hvdlite_request::*Data,
          int32_t hvdlite_request::*Count>
bool setInts(KeywordRequest& out, const char* field, PyObject* value) {
  PyObject* sequence = PySequence_Fast(value, "");  // tuples and lists themselves, no copy
  if (!sequence) {
    PyErr_Clear();
    return typeError(field, "a sequence of ints", value);
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
  PyObject** items = PySequence_Fast_ITEMS(sequence);
  auto& storage = out.*Storage;
  storage.resize(static_cast<size_t>(n));
  bool ok = true;
  for (Py_ssize_t i = 0; i < n && ok; ++i) {
    long long v;
    ok = toInt64(field, items[i], v);
    storage[i] = v;
  }
  Py_DECREF(sequence);
  if (!ok) return false;
  if (n > INT32_MAX) {
    PyErr_Format(PyExc_ValueError, "enqueue(): %s has too many entries (%zd)", field, n);
    return false;
  }
  out.request.*Data = storage.data();
  out.request.*Count = static_cast<int32_t>(n);
  return true;
}

bool setWake(KeywordRequest& out, const char* field, PyObject* value) {
  int wake = PyObject_IsTrue(value);
  if (wake < 0) return false;
  if (wake) {
    out.request.flags &= ~static_cast<uint32_t>(HVDLITE_REQUEST_NO_WAKE);
  } else {
    out.request.flags |= HVDLITE_REQUEST_NO_WAKE;
  }
  return true;
}

using R = hvdlite_request;
using K = KeywordRequest;

struct Field {
  const char* name;
  Setter set;
};

// In the order the Python helper (hvdlite/common/requests.py) passes them,
// which makes each lookup in parseKeywords one comparison. op and name first:
// they are required.
constexpr Field kFields[] = {
    {"op", setInt32<&R::op>},
    {"name", setString<&R::name>},
    {"process_set_id", setInt32<&R::process_set_id>},
    {"input", setAddress<const void*, &R::input>},
    {"output", setAddress<void*, &R::output>},
    {"output_bytes", setInt64<&R::output_bytes>},
    {"dtype", setInt32<&R::dtype>},
    {"shape", setInts<&K::shape, &R::shape, &R::ndim>},
    {"reduce_op", setInt32<&R::reduce_op>},
    {"prescale", setDouble<&R::prescale>},
    {"postscale", setDouble<&R::postscale>},
    {"root_rank", setInt32<&R::root_rank>},
    {"splits", setInts<&K::splits, &R::splits, &R::num_splits>},
    {"device", setInt32<&R::device>},
    {"ready_event", setAddress<void*, &R::ready_event>},
    {"stream", setAddress<void*, &R::stream>},
    {"group", setString<&R::group>},
    {"group_size", setInt32<&R::group_size>},
    {"process_set_ranks",
     setInts<&K::process_set_ranks, &R::process_set_ranks, &R::num_process_set_ranks>},
    {"removed_process_set_id", setInt32<&R::removed_process_set_id>},
    {"wake", setWake},
};
constexpr size_t kNumFields = std::size(kFields);
constexpr uint32_t kRequired = 0b11;  // op, name

// The field names as interned strings: keyword names written in Python code
// are interned too, so a match is a pointer comparison.
PyObject* const* internedNames() {
  static PyObject* names[kNumFields] = {};
  if (!names[0]) {
    for (size_t i = 0; i < kNumFields; ++i) names[i] = PyUnicode_InternFromString(kFields[i].name);
  }
  return names;
}

// The field `key` names, looking from `from` on (the likely one); kNumFields
// when none.
size_t findField(PyObject* key, size_t from) {
  PyObject* const* names = internedNames();
  for (size_t i = 0; i < kNumFields; ++i) {
    size_t f = (from + i) % kNumFields;
    if (names[f] == key) return f;
  }
  for (size_t f = 0; f < kNumFields; ++f) {  // a name built at run time (**kwargs)
    if (PyUnicode_Check(key) && PyUnicode_CompareWithASCIIString(key, kFields[f].name) == 0) return f;
  }
  return kNumFields;
}

}  // namespace

bool parseKeywords(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, KeywordRequest& out) {
  if (nargs != 0) {
    PyErr_Format(PyExc_TypeError, "enqueue() takes keyword arguments only (got %zd positional); "
                 "name each field: enqueue(op=..., name=..., ...)", nargs);
    return false;
  }
  Py_ssize_t n = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  uint32_t seen = 0;
  size_t next = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);
    size_t f = findField(key, next);
    if (f == kNumFields) {
      PyErr_Format(PyExc_TypeError, "enqueue() got an unexpected keyword argument %R; it takes %s", key,
                   keywordList());
      return false;
    }
    if (!kFields[f].set(out, kFields[f].name, args[i])) return false;
    seen |= 1u << f;
    next = f + 1;
  }
  if ((seen & kRequired) != kRequired) {
    PyErr_Format(PyExc_TypeError, "enqueue() missing required keyword argument '%s'",
                 (seen & 1) ? "name" : "op");
    return false;
  }
  return true;
}

const char* keywordList() {
  static const std::string list = [] {
    std::string out;
    for (const auto& field : kFields) out += (out.empty() ? "" : ", ") + std::string(field.name);
    return out;
  }();
  return list.c_str();
}

}  // namespace hvdlite::python
