#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <new>
#include <string>

#include "common/errors.h"
#include "python/bind.h"
#include "python/call_sites.h"
#include "python/exceptions.h"
#include "python/keyword_request.h"
#include "python/numpy_dtypes.h"
#include "python/one_call.h"

namespace py = pybind11;

namespace hvdlite::python {

py::object toArray(std::unique_ptr<uint8_t[]> bytes, size_t nbytes) {
  if (!bytes) return py::none();
  uint8_t* raw = bytes.release();  // now owned by the capsule
  py::capsule owner(raw, [](void* p) { delete[] static_cast<uint8_t*>(p); });
  return py::array_t<uint8_t>({static_cast<py::ssize_t>(nbytes)}, {1}, raw, owner);
}

namespace {

struct DeviceOutput {
  core::DeviceMemory memory;
  size_t nbytes;
  int32_t device;
};

// A reference to a Python object that C++ may drop on any thread (taking the
// GIL), or after the interpreter is gone (then it is leaked).
class PyRef {
 public:
  explicit PyRef(py::object object) : object_(object.release().ptr()) {}
  ~PyRef() {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    Py_DECREF(object_);
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  py::object get() const { return py::reinterpret_borrow<py::object>(object_); }  // with the GIL

 private:
  PyObject* object_;
};

// The deleter of device memory a Python allocator gave: it holds the Python
// object that owns the memory (a torch tensor), which DeviceOutput.owner hands
// back to the binding.
struct PyOwner {
  std::shared_ptr<PyRef> owner;
  void operator()(void*) { owner.reset(); }
};

// Note [Outputs from the framework's allocator] in api/session.h: calls
// allocate(nbytes, device, stream, nccl_stream) -> (owner, data_ptr) with the
// GIL taken; a Python exception becomes the entry's failure.
api::DeviceAllocator pythonAllocator(py::object allocate) {
  return [fn = std::make_shared<PyRef>(std::move(allocate))](const api::DeviceAllocation& a) {
    py::gil_scoped_acquire gil;
    try {
      py::tuple got = fn->get()(a.bytes, a.device, reinterpret_cast<uintptr_t>(a.stream),
                                reinterpret_cast<uintptr_t>(a.nccl_stream));
      auto data = reinterpret_cast<void*>(got[1].cast<uintptr_t>());
      return core::DeviceMemory(data, PyOwner{std::make_shared<PyRef>(got[0])});
    } catch (py::error_already_set& e) {
      throw std::runtime_error(e.what());  // "MemoryError: ...", formatted while the GIL is held
    } catch (py::cast_error& e) {
      throw std::runtime_error(std::string("the output allocator must return (owner, data_ptr): ") + e.what());
    }
  };
}

// Note [Handles as plain objects]
// enqueue returns the operation's Handle itself, which Python keeps in
// hvdlite/common/handles.py's table (the one handle table; the Session keeps
// none: Note [One way in] in api/session.h). Every gradient makes one, so it
// is a plain CPython object holding the shared_ptr: a pybind11 class would
// also register each instance in pybind11's instance map and cost more than
// the table it replaces (measured: 0.25 us more a call, 6 % of a 4-byte
// allreduce on one rank; this costs nothing measurable).
struct HandleObject {
  PyObject_HEAD
  std::shared_ptr<Handle> handle;  // placement-constructed in newHandleObject
};

PyTypeObject* handle_type = nullptr;

void deallocHandle(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  reinterpret_cast<HandleObject*>(self)->handle.~shared_ptr();
  type->tp_free(self);
  Py_DECREF(type);  // a heap type: each instance holds a reference
}

PyObject* reprHandle(PyObject* self) {
  const Handle& h = *reinterpret_cast<HandleObject*>(self)->handle;
  return PyUnicode_FromString(
      detail::concat("<hvdlite._core.Handle ", opTypeName(h.op), " of '", h.name, "'>").c_str());
}

PyObject* refuseNewHandle(PyTypeObject*, PyObject*, PyObject*) {
  PyErr_SetString(PyExc_TypeError, "hvdlite._core.Handle cannot be created; enqueue() returns one");
  return nullptr;
}

PyObject* newHandleObject(std::shared_ptr<Handle> handle) {
  PyObject* self = handle_type->tp_alloc(handle_type, 0);
  if (self) new (&reinterpret_cast<HandleObject*>(self)->handle) std::shared_ptr<Handle>(std::move(handle));
  return self;
}

void registerHandleType(py::module_& m) {
  static PyType_Slot slots[] = {
      {Py_tp_dealloc, reinterpret_cast<void*>(deallocHandle)},
      {Py_tp_repr, reinterpret_cast<void*>(reprHandle)},
      {Py_tp_new, reinterpret_cast<void*>(refuseNewHandle)},
      {Py_tp_doc, const_cast<char*>("One queued operation, from enqueue(): for poll() and wait().")},
      {0, nullptr}};
  static PyType_Spec spec = {"hvdlite._core.Handle", sizeof(HandleObject), 0, Py_TPFLAGS_DEFAULT, slots};
  handle_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&spec));
  if (!handle_type) throw py::error_already_set();
  m.attr("Handle") = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(handle_type));
}

// The Handle behind an argument of poll() or wait().
Handle& handleOf(py::handle object) {
  if (Py_TYPE(object.ptr()) != handle_type) {
    throw py::type_error(std::string("expected a handle from hvdlite._core.enqueue(), not ") +
                         Py_TYPE(object.ptr())->tp_name);
  }
  return *reinterpret_cast<HandleObject*>(object.ptr())->handle;
}

// Note [Keyword requests]
// enqueue takes api.h's request as keyword arguments, so that no caller can
// send a value to the wrong field by position. It is every gradient's path,
// and pybind11 looks up each declared keyword in a dict built per call
// (about 2 us on ~20 fields, measured), so enqueue is a plain
// METH_FASTCALL function: Python passes the keyword names as a tuple of
// interned strings, which keyword_request.cc matches by pointer, in the order
// hvdlite/common/requests.py passes them. The request then enters the core the
// one way the C API's requests do too (Note [One way in] in api/session.h),
// completing through a Handle that the caller keeps (in
// hvdlite/common/handles.py's table). The call site needs no keyword: it is
// read off the calling thread's frames here (Note [Capturing a call site] in
// call_sites.cc).

PyObject* enqueue(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return raisingAsPython([&]() -> PyObject* {
    KeywordRequest keywords;
    if (!parseKeywords(args, nargs, kwnames, keywords)) return nullptr;
    auto handle = std::make_shared<Handle>();
    session().submit(keywords.request, {handle}, captureCallSite());
    return newHandleObject(std::move(handle));  // Note [Handles as plain objects]
  });
}

const char* enqueueDoc() {
  static const std::string doc =
      std::string("enqueue(*, op, name, ...) -> handle\n\nQueues one collective; keywords: ") +
      keywordList() + ". A bad code or argument raises ValueError before anything is queued.";
  return doc.c_str();
}

}  // namespace

// Note [Interruptible waits]
// A wait can last (slow peers; a stall, until its shutdown time), and Python
// runs signal handlers only when the interpreter gets control back: a thread
// blocked in C++ would keep Ctrl-C and SIGALRM timeouts (pytest-timeout)
// waiting for the collective. So a wait comes back every kWaitSlice, without
// holding the GIL meanwhile, and runs the handlers. One that raises
// (KeyboardInterrupt, a timeout's exception) ends the wait: this rank stops
// collectives here and on every peer with a message naming it
// (Note [Aborting from a waiting thread] in core/runtime_failures.cc), and the
// exception propagates. A short collective never reaches a slice's end, so
// this costs the latency path nothing.
constexpr auto kWaitSlice = std::chrono::milliseconds(100);

// Releases the GIL for its scope, as py::gil_scoped_release does without the
// latter's look-up of pybind11's internals (~50 instructions of every
// synchronous collective, callgrind): a wait is on its caller's own thread
// state, which it takes back as it was.
class WithoutGil {
 public:
  WithoutGil() : state_(PyEval_SaveThread()) {}
  ~WithoutGil() { PyEval_RestoreThread(state_); }
  WithoutGil(const WithoutGil&) = delete;
  WithoutGil& operator=(const WithoutGil&) = delete;

 private:
  PyThreadState* state_;
};

void waitInterruptibly(Handle& handle) {
  while (true) {
    bool done;
    {
      const WithoutGil released;
      done = session().wait(handle, kWaitSlice);
    }
    if (done) return;
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

// Note [One call for a synchronous collective]
// A synchronous collective (allreduce_, a broadcast in place, barrier, join)
// used to be two calls into the core, enqueue and wait, and between them the
// handle table's bookkeeping in Python: a dozen Python calls, about 2 us of a
// 4-byte allreduce that takes 4.5 us on 2 ranks (bench/RESULTS.md's profile).
// run() is both calls in one: it submits with no wake-up for the background
// thread, since this thread runs the cycles (Note [Cycles on the waiting
// thread] in core/runtime_cycles.cc), waits interruptibly, raises the
// failure, and returns the operation's value. No handle reaches Python, so
// it takes only requests whose result lands in buffers the caller passed:
// outputs the core sizes by negotiation need enqueue() and wait().
static bool allocatesOutput(const hvdlite_request& request) {
  return request.op == HVDLITE_OP_ALLTOALL ||  // its received splits reach Python through wait()
         ((request.op == HVDLITE_OP_ALLGATHER || request.op == HVDLITE_OP_REDUCESCATTER) &&
          (!request.output || request.output_bytes <= 0));
}

// Submits `request` with no wake-up, completing through `handle`: shared
// with the entry, which may outlive an interrupted wait, or be dropped by the
// core as soon as it completes.
static void submitNoWake(hvdlite_request& request, std::shared_ptr<Handle> handle) {
  request.flags |= HVDLITE_REQUEST_NO_WAKE;
  session().submit(request, {std::move(handle)}, captureCallSite());
}

std::shared_ptr<Handle> submitOnly(hvdlite_request& request) {
  auto handle = std::make_shared<Handle>();
  submitNoWake(request, handle);
  return handle;
}

// Note [A reused handle for a synchronous collective]
// Every synchronous collective made a Handle (a heap block with its mutex,
// condition variable and result fields) and freed it again: ~200
// instructions of a 4-byte allreduce (callgrind, bench/call_profile.py). Its
// handle reaches no one but the calling thread and the entry, so each thread
// keeps its last one and, once nobody else holds it (the entry completed and
// dropped it: not after an interrupted wait, whose entry may still be
// queued), resets it to a new Handle's state for the next call: member by
// member, not destroyed and made again in place (~150 instructions fewer,
// callgrind), so that its name's buffer stays and a loop over one tensor
// does not copy the name into it again (Session::attachHandle compares).
static std::shared_ptr<Handle> reusedHandle() {
  thread_local std::shared_ptr<Handle> last;
  if (!last || last.use_count() != 1) {
    last = std::make_shared<Handle>();
    return last;
  }
  // The entry's release of its reference came before: what it wrote is seen.
  std::atomic_thread_fence(std::memory_order_acquire);
  last->resetForReuse();
  return last;
}

PyObject* submitForTable(hvdlite_request& request) {
  // The entry is made first, so that nothing can fail once the core holds
  // the caller's buffers (it would write into them with no one keeping them).
  auto handle = std::make_shared<Handle>();
  PyObject* core_handle = newHandleObject(handle);  // Note [Handles as plain objects]
  if (!core_handle) return nullptr;
  PyObject* code = PyLong_FromLong(request.dtype);
  if (!code) {
    Py_DECREF(core_handle);
    return nullptr;
  }
  PyObject* entry = PyTuple_New(2);
  if (!entry) {
    Py_DECREF(core_handle);
    Py_DECREF(code);
    return nullptr;
  }
  PyTuple_SET_ITEM(entry, 0, core_handle);  // steals
  PyTuple_SET_ITEM(entry, 1, code);
  try {
    session().submit(request, {std::move(handle)}, captureCallSite());
  } catch (...) {
    Py_DECREF(entry);
    throw;
  }
  return entry;
}

Handle* coreHandleOf(PyObject* object) {
  return Py_TYPE(object) == handle_type ? reinterpret_cast<HandleObject*>(object)->handle.get() : nullptr;
}

void finishWait(Handle& handle) {
  waitInterruptibly(handle);
  if (!handle.status.ok()) raiseStatus(handle.status);
  // CUDA: the caller's stream is the one it submitted on.
  if (handle.done_event) session().orderAfter(handle, nullptr, true);
}

int64_t submitAndWait(hvdlite_request& request) {
  std::shared_ptr<Handle> handle = reusedHandle();
  submitNoWake(request, handle);
  finishWait(*handle);
  return handle->value;
}

namespace {

PyObject* run(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return raisingAsPython([&]() -> PyObject* {
    KeywordRequest keywords;
    if (!parseKeywords(args, nargs, kwnames, keywords)) return nullptr;
    if (allocatesOutput(keywords.request)) {
      PyErr_Format(PyExc_TypeError, "run(): the output of %s '%s' is sized by negotiation (pass output and output_bytes, or "
                   "use enqueue() and wait(), which return it)", opTypeName(static_cast<OpType>(keywords.request.op)),
                   keywords.request.name);
      return nullptr;
    }
    return PyLong_FromLongLong(submitAndWait(keywords.request));
  });
}

// Note [In-place allreduce of an array in one call]
// hvdlite.numpy's allreduce_ with its common arguments spent about 0.6 us in
// Python before run() (a 4-byte allreduce at 2 ranks takes 2.5 us; Open MPI's
// 0.9 to 1.8): three Python frames, reading the array's flags, shape and
// dtype as Python objects, and the keywords. allreduce_array takes the
// arguments as the user gave them and reads all of that off the array's C
// struct. It decides only what it can decide alone and returns None for
// anything else (a non-NumPy or read-only array, an unusual dtype or byte
// order, average=, an op that is not a plain int code, integer scales, an
// unnamed tensor, an unregistered set), so that the Python path, with its
// checks and its words, handles every other call exactly as before.
// The array's dtype: Note [One NumPy dtype table] in numpy_dtypes.h.
static_assert(sizeof(Py_ssize_t) == sizeof(int64_t), "NumPy's dimensions serve as the request's shape");

}  // namespace

Plainness plainReduction(PyObject* name, PyObject* op, PyObject* prescale, PyObject* postscale,
                         PyObject* process_set, PyObject* average, PlainReduction& plain) {
  if (average != Py_None || !PyFloat_CheckExact(prescale) || !PyFloat_CheckExact(postscale)) {
    return Plainness::kForPython;
  }
  if (op != Py_None) {
    if (!PyLong_Check(op)) return Plainness::kForPython;
    const long reduce_op = PyLong_AsLong(op);
    if (reduce_op < 0 || reduce_op >= HVDLITE_REDUCE_ADASUM) {
      PyErr_Clear();  // out of range for a long: not a plain op either
      return Plainness::kForPython;
    }
    plain.reduce_op = static_cast<int32_t>(reduce_op);
  }
  const Plainness target = plainTarget(name, process_set, plain);
  if (target != Plainness::kPlain) return target;
  plain.prescale = PyFloat_AS_DOUBLE(prescale);
  plain.postscale = PyFloat_AS_DOUBLE(postscale);
  return Plainness::kPlain;
}

// Note [The global set without an attribute lookup]
// Reading process_set.process_set_id through the C API (PyObject_GetAttr:
// the type's attribute cache, then the instance's values) cost ~200
// instructions of a one-call collective, where most calls pass the default,
// hvdlite.common.process_sets.global_process_set. Its id is 0 for good
// (process_sets.py numbers it at import; add_process_set refuses a
// registered set and remove_process_set the global one), so that object is
// recognised by identity. It is looked up once the module is imported (it
// is, before any collective can default to it) and held for the process.
static PyObject* globalProcessSet() {
  static PyObject* global_set = nullptr;  // a reference kept for good, set under the GIL
  if (global_set) return global_set;
  static PyObject* const module_name = PyUnicode_InternFromString("hvdlite.common.process_sets");
  PyObject* module = PyImport_GetModule(module_name);  // null when not imported (yet)
  if (!module) {
    PyErr_Clear();
    return nullptr;  // no object to recognise: every set is looked up
  }
  global_set = PyObject_GetAttrString(module, "global_process_set");
  Py_DECREF(module);
  if (!global_set) PyErr_Clear();
  return global_set;
}

Plainness plainTarget(PyObject* name, PyObject* process_set, PlainReduction& plain) {
  if (!PyUnicode_CheckExact(name) || process_set == Py_None) return Plainness::kForPython;
  long process_set_id = 0;
  if (process_set != globalProcessSet()) {
    static PyObject* const set_id_name = PyUnicode_InternFromString("process_set_id");
    PyObject* set_id = PyObject_GetAttr(process_set, set_id_name);
    if (!set_id) return Plainness::kFailed;
    process_set_id = PyLong_CheckExact(set_id) ? PyLong_AsLong(set_id) : -1;
    Py_DECREF(set_id);
    if (process_set_id < 0 || process_set_id > INT32_MAX) {
      PyErr_Clear();
      return Plainness::kForPython;
    }
  }
  Py_ssize_t name_size;
  const char* name_utf8 = PyUnicode_AsUTF8AndSize(name, &name_size);
  if (!name_utf8) return Plainness::kFailed;
  if (name_size == 0 || std::strlen(name_utf8) != static_cast<size_t>(name_size)) return Plainness::kForPython;
  plain.name = name_utf8;
  plain.process_set_id = static_cast<int32_t>(process_set_id);
  return Plainness::kPlain;
}

PyObject* allreduceInPlace(PyObject* result, const PlainReduction& plain, void* data, int32_t dtype,
                           const int64_t* shape, int32_t ndim) {
  return raisingAsPython([&]() -> PyObject* {
    hvdlite_request request = plainRequest(HVDLITE_OP_ALLREDUCE, plain, data, data, dtype, shape, ndim);
    submitAndWait(request);
    Py_INCREF(result);
    return result;
  });
}

namespace {

// A NumPy array the core can reduce in place as it is: writable, C-contiguous,
// of a carried dtype in native byte order.
struct PlainArray {
  void* data = nullptr;
  int32_t dtype = -1;
  const int64_t* shape = nullptr;
  int32_t ndim = 0;
};

bool plainArray(PyObject* array, PlainArray& out) {
  auto& numpy = py::detail::npy_api::get();
  if (!numpy.PyArray_Check_(array)) return false;
  const auto* proxy = py::detail::array_proxy(array);
  constexpr int kWritableC = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  const auto* descr = py::detail::array_descriptor_proxy(proxy->descr);
  out.dtype = dtypeOfNumpy(descr->type_num);
  if ((proxy->flags & kWritableC) != kWritableC || out.dtype < 0 || descr->byteorder == '>') return false;
  out.data = proxy->data;
  out.shape = reinterpret_cast<const int64_t*>(proxy->dimensions);
  out.ndim = proxy->nd;
  return true;
}

// The array and reduction arguments of allreduce_array(_async) (array, name,
// op, prescale, postscale, process_set, average), judged.
Plainness plainArrayReduction(const char* function, PyObject* const* args, Py_ssize_t nargs, PlainArray& array,
                              PlainReduction& plain) {
  if (nargs != 7) {
    PyErr_Format(PyExc_TypeError, "%s() takes 7 arguments (%zd given)", function, nargs);
    return Plainness::kFailed;
  }
  if (!plainArray(args[0], array)) return Plainness::kForPython;
  return plainReduction(args[1], args[2], args[3], args[4], args[5], args[6], plain);
}

// allreduce_array(array, name, op, prescale, postscale, process_set, average)
// -> array, or None where the Python path must decide.
PyObject* allreduceArray(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  PlainArray array;
  PlainReduction plain;
  const Plainness arguments = plainArrayReduction("allreduce_array", args, nargs, array, plain);
  if (arguments != Plainness::kPlain) return notPlainResult(arguments);
  return allreduceInPlace(args[0], plain, array.data, array.dtype, array.shape, array.ndim);
}

// Note [Asynchronous allreduce of an array in one call]
// A training step submits each gradient with allreduce_async_ and then
// synchronizes them all, so a step of many small gradients pays the Python
// path per tensor: seven Python frames and the keywords before enqueue
// (a submission took 1.24 us, 0.53 of them enqueue's; this path takes 0.68:
// bench/RESULTS.md, 2026-11-28). allreduce_array_async is Note [In-place allreduce
// of an array in one call] without the wait: it judges the same arguments,
// submits, and returns the core entry, (Handle, dtype code), which the
// caller keeps in the handle table (hvdlite/common/handles.py) until
// synchronize(); None, having done nothing, where the Python path decides.
PyObject* allreduceArrayAsync(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  PlainArray array;
  PlainReduction plain;
  const Plainness arguments = plainArrayReduction("allreduce_array_async", args, nargs, array, plain);
  if (arguments != Plainness::kPlain) return notPlainResult(arguments);
  return raisingAsPython([&]() -> PyObject* {
    hvdlite_request request =
        plainRequest(HVDLITE_OP_ALLREDUCE, plain, array.data, array.data, array.dtype, array.shape, array.ndim);
    return submitForTable(request);
  });
}

size_t byteCount(const std::vector<int64_t>& shape, size_t esize) {
  size_t n = esize;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

// A list of Python ints; null with a Python error set.
PyObject* intList(const std::vector<int64_t>& values) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(values.size()));
  for (size_t i = 0; list && i < values.size(); ++i) {
    PyObject* item = PyLong_FromLongLong(values[i]);
    if (!item) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), item);  // steals
  }
  return list;
}

// Note [Waiting without pybind11]
// wait() runs once for every tensor of every step (synchronize()), and
// pybind11's dispatch (argument loaders, the result's casts) cost about 1,400
// instructions a call there, besides the wait's own 2,200; this way about 500
// (callgrind, 200 x 16 KiB at 2 ranks: bench/RESULTS.md, 2026-11-28). So it is a plain
// METH_FASTCALL function of positional arguments, as enqueue is (Note
// [Keyword requests]).
// wait(handle, dtype=0, stream=None) -> (output bytes as a uint8 array or
// None, output shape, received splits, value).
PyObject* waitHandle(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 3) {
    PyErr_Format(PyExc_TypeError, "wait(handle, dtype=0, stream=None) takes 1 to 3 arguments (%zd given)", nargs);
    return nullptr;
  }
  if (Py_TYPE(args[0]) != handle_type) {
    PyErr_Format(PyExc_TypeError, "expected a handle from hvdlite._core.enqueue(), not %.100s",
                 Py_TYPE(args[0])->tp_name);
    return nullptr;
  }
  long dtype = 0;
  if (nargs > 1) {
    dtype = PyLong_AsLong(args[1]);
    if (dtype == -1 && PyErr_Occurred()) return nullptr;
    if (dtype < 0 || dtype >= HVDLITE_NUM_DTYPES) {
      PyErr_Format(PyExc_ValueError, "wait(): unknown dtype code %ld", dtype);
      return nullptr;
    }
  }
  PyObject* stream = nargs > 2 ? args[2] : Py_None;
  return raisingAsPython([&]() -> PyObject* {
    Handle* h = &handleOf(args[0]);  // alive: the caller holds its object
    waitInterruptibly(*h);
    if (!h->status.ok()) raiseStatus(h->status);
    if (h->done_event) {
      const bool use_own = stream == Py_None;
      void* consumer = use_own ? nullptr : PyLong_AsVoidPtr(stream);
      if (!use_own && !consumer && PyErr_Occurred()) throw py::error_already_set();
      session().orderAfter(*h, consumer, use_own);
    }
    const size_t nbytes = byteCount(h->output_shape, dtypeSize(static_cast<DataType>(dtype)));
    py::object out = h->device_output ? py::cast(DeviceOutput{h->device_output, nbytes, h->device})
                                      : toArray(std::move(h->output), nbytes);
    py::object shape = py::reinterpret_steal<py::object>(intList(h->output_shape));
    py::object splits = py::reinterpret_steal<py::object>(intList(h->received_splits));
    if (!shape || !splits) throw py::error_already_set();
    return py::make_tuple(out, shape, splits, h->value).release().ptr();
  });
}

}  // namespace

void bindCollectives(py::module_& m) {
  registerHandleType(m);

  addPlainFunction(m, "enqueue", enqueue, enqueueDoc());

  addPlainFunction(m, "run", run,
      "run(*, op, name, ...) -> value\n\nQueues one collective and waits for it on this thread, in one "
      "call (Note [One call for a synchronous collective]); keywords as enqueue's. Returns the operation's "
      "value (join's last rank; -1 for most); raises its failure. Not for outputs the core allocates "
      "(allgather, alltoall, reducescatter without an output): enqueue() and wait() return those.");

  addPlainFunction(m, "allreduce_array", allreduceArray,
      "allreduce_array(array, name, op, prescale, postscale, process_set, average) -> array or None\n\n"
      "hvdlite.numpy.allreduce_ in one call for its common arguments (Note [In-place allreduce of an "
      "array in one call]): reduces the NumPy array in place and returns it; returns None, having done "
      "nothing, where the arguments need the Python path's checks.");
  addPlainFunction(m, "allreduce_array_async", allreduceArrayAsync,
      "allreduce_array_async(array, name, op, prescale, postscale, process_set, average) -> (handle, dtype code) or "
      "None\n\nhvdlite.numpy.allreduce_async_ in one call for its common arguments (Note [Asynchronous allreduce "
      "of an array in one call]): queues the in-place allreduce of the NumPy array and returns its core entry for "
      "the handle table; returns None, having done nothing, where the arguments need the Python path's checks.");

  // A CUDA output the core allocated: its address, and ownership (cudaFree,
  // or the owner's release, when the last reference, e.g. a framework
  // tensor's, goes).
  py::class_<DeviceOutput>(m, "DeviceOutput")
      .def_property_readonly("data_ptr", [](const DeviceOutput& o) { return reinterpret_cast<uintptr_t>(o.memory.get()); })
      .def_readonly("nbytes", &DeviceOutput::nbytes)
      .def_readonly("device", &DeviceOutput::device)
      // What set_device_allocator's function returned as the owner, or None.
      .def_property_readonly("owner", [](const DeviceOutput& o) {
        auto* deleter = std::get_deleter<PyOwner>(o.memory);
        return deleter && deleter->owner ? deleter->owner->get() : py::none();
      });

  // Note [Outputs from the framework's allocator] in api/session.h; None:
  // the core's cudaMalloc.
  // The stream NCCL works on for GPU `device` (a cudaStream_t), e.g. for a
  // test to time NCCL's work with events of its own.
  m.def("device_stream", [](int device) {
    py::gil_scoped_release release;
    return reinterpret_cast<uintptr_t>(session().runtime()->deviceStream(device));
  }, py::arg("device"));
  m.def("set_device_allocator", [](py::object allocate) {
    session().setDeviceAllocator(allocate.is_none() ? api::DeviceAllocator() : pythonAllocator(allocate));
  }, py::arg("allocate"));

  m.def("poll", [](py::handle handle) { return handleOf(handle).isDone(); }, py::arg("handle"));

  // Note [Failures by message] in api/session.h: the exception hvdlite
  // raises for the failure with this message (a framework's error carried
  // only its words), with its type and fields; None when none is known.
  m.def("exception_for", [](const std::string& message) -> py::object {
    core::Status failure = session().failureNamed(message);
    if (!failure.details) return py::none();
    return makeException(failure);
  }, py::arg("message"));

  addPlainFunction(m, "wait", waitHandle,
      "wait(handle, dtype=0, stream=None) -> (output or None, output shape, received splits, value)\n\n"
      "Waits for an enqueue()d operation (Note [Waiting without pybind11]); raises its failure. CUDA: `stream` "
      "(a cudaStream_t; 0 is the legacy default stream; None: the one the tensor was submitted on) and the "
      "submitting stream wait for the result (Note [Completion on the consumer's stream]).");
}

}  // namespace hvdlite::python
