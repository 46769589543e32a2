// hvdlite.torch's synchronous collectives, and its allreduce_async(_), in one
// call into the core.
#include <Python.h>

#include <string>
#include <vector>

#include "common/types.h"
#include "python/bind.h"
#include "python/handle_table.h"
#include "python/one_call.h"

namespace py = pybind11;

namespace hvdlite::python {
namespace {

// Note [Torch collectives in one call]
// hvdlite.torch's allreduce_ made about twelve Python calls before the core
// (3.1 us for 4 bytes at 2 ranks against Open MPI's 1.1); its broadcast,
// allgather and grouped_allreduce as many or more (a handle in the table,
// synchronize, finish). tensor_call is Note [In-place allreduce of an array
// in one call] (bind_collectives.cc) for torch, one entry for all four:
// it judges the user's arguments as given, reads each tensor, submits (a
// group's members together), waits on this thread and returns the result,
// or returns None, having done nothing, for anything it cannot judge alone;
// hvdlite/torch/collectives.py then takes its general path, which says what is
// wrong, exactly as before (Note [One call, else the general path] there).
//
// hvdlite compiles nothing against torch (DESIGN.md), so a tensor is read
// through torch's own attributes, from C, without a Python frame: its type
// (exactly one that hvdlite.torch registered: torch.Tensor,
// torch.nn.Parameter; a subclass may give data_ptr() another meaning),
// is_cpu, requires_grad (for a new output: autograd's Functions take those),
// dtype (one of the codes registered with it), shape, whether it is
// contiguous (Note [Contiguous without is_contiguous() for one element]) and
// data_ptr() (the attributes through their getters: Note [Tensor attributes
// read through their getters]). Declined: CUDA tensors (the stream and device
// need the Python path's calls), other layouts (is_contiguous() raises for
// sparse CSR, is False for COO; data_ptr() raises for all), more than kMaxTorchDims dimensions, a shape
// torch cannot give (nested tensors), an empty or non-list group, and the
// arguments plainReduction/plainTarget leave to Python. New outputs come from
// torch.empty_like, and an allgather's from from_core_output
// (hvdlite/torch/tensors.py), the general path's own functions, so both
// paths give the same tensors.
// Note [Tensor attributes read through their getters]
// Each attribute read through PyObject_GetAttr costs about 300 instructions
// besides torch's own getter (the type's lookup, the descriptor's checks):
// a 4-byte allreduce_ read three that way (callgrind, one rank). is_cpu,
// dtype, shape and requires_grad are getset descriptors of torch's C
// tensor type, data descriptors, which an instance's __dict__ cannot shadow, so
// calling the descriptor's getter is what attribute access does, with
// nothing in between. They are looked up once per registered type (as
// attribute access finds them: the type's MRO), kept with the type's
// version tag, which CPython changes whenever the type or a base is
// modified, and looked up again then; any type whose lookup is not the
// generic one, or whose attribute is not such a descriptor, is read with
// PyObject_GetAttr as before. The methods (is_contiguous(), data_ptr()) are
// still called by name: an instance attribute may shadow a method.
struct AttributeGetter {
  getter get = nullptr;  // null: read with PyObject_GetAttr
  void* closure = nullptr;
};

enum TensorAttribute { kIsCpu, kRequiresGrad, kDtype, kShape, kNumTensorAttributes };

struct TypeGetters {
  PyTypeObject* type = nullptr;  // borrowed from TorchTypes::tensor_types
  unsigned int version_tag = 0;  // the type's tag when `getters` were looked up; 0: none
  AttributeGetter getters[kNumTensorAttributes];
};

constexpr int kMaxTensorTypes = 4;
constexpr int kMaxDtypes = 32;

// A torch.dtype and its request dtype code. torch's dtypes are singletons
// compared by identity (torch.dtype defines no __eq__), so a scan of
// pointers finds what the dict's lookup finds, without hashing.
struct DtypeCode {
  PyObject* dtype = nullptr;  // borrowed from TorchTypes::dtype_codes' keys
  int32_t code = -1;
};

struct TorchTypes {
  PyObject* tensor_types = nullptr;      // a tuple of type objects, owned
  PyObject* dtype_codes = nullptr;       // {torch.dtype: request dtype code}, owned
  PyObject* empty_like = nullptr;        // torch.empty_like, owned
  PyObject* from_core_output = nullptr;  // (raw, shape, dtype) -> tensor, owned
  PyObject* binding = nullptr;           // "hvdlite.torch", the handle table's name for it, owned
  TypeGetters type_getters[kMaxTensorTypes];  // the first kMaxTensorTypes of tensor_types
  DtypeCode dtypes[kMaxDtypes];          // dtype_codes' items, when it has at most kMaxDtypes
  int dtype_count = -1;                  // -1: look dtype_codes up instead
  int last_dtype = 0;                    // where the previous dtype was found, looked at first
};

TorchTypes& torchTypes() {
  static TorchTypes types;  // set once by hvdlite.torch; read under the GIL
  return types;
}

PyObject* attributeName(TensorAttribute attribute) {
  static PyObject* const names[kNumTensorAttributes] = {
      PyUnicode_InternFromString("is_cpu"), PyUnicode_InternFromString("requires_grad"),
      PyUnicode_InternFromString("dtype"), PyUnicode_InternFromString("shape")};
  return names[attribute];
}

// Looks the getters of `entry.type` up again (Note [Tensor attributes read
// through their getters]); leaves them null where attribute access is not
// that simple.
void lookUpGetters(TypeGetters& entry) {
  PyTypeObject* type = entry.type;
  for (auto& getter : entry.getters) getter = {};
  entry.version_tag = 0;
  if (type->tp_getattro != PyObject_GenericGetAttr) return;
  for (int a = 0; a < kNumTensorAttributes; ++a) {
    PyObject* found = _PyType_Lookup(type, attributeName(static_cast<TensorAttribute>(a)));  // borrowed
    if (!found || !Py_IS_TYPE(found, &PyGetSetDescr_Type)) continue;
    auto* descriptor = reinterpret_cast<PyGetSetDescrObject*>(found);
    if (!descriptor->d_getset->get || !PyType_IsSubtype(type, PyDescr_TYPE(found))) continue;
    entry.getters[a] = {descriptor->d_getset->get, descriptor->d_getset->closure};
  }
  // _PyType_Lookup gave the type a valid tag (it caches by it), unless tags ran out.
  if (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) entry.version_tag = type->tp_version_tag;
}

// The getters of a registered tensor's type, current; null for a type past
// the first kMaxTensorTypes.
const TypeGetters* gettersOf(PyObject* tensor, TorchTypes& types) {
  for (auto& entry : types.type_getters) {
    if (entry.type != Py_TYPE(tensor)) continue;
    PyTypeObject* type = entry.type;
    if (!(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) || type->tp_version_tag != entry.version_tag) {
      lookUpGetters(entry);
    }
    return &entry;
  }
  return nullptr;
}

// A tensor's attribute: through its getter where it has one, else by name.
// A new reference, or null with a Python error set.
PyObject* readAttribute(PyObject* tensor, const TypeGetters* getters, TensorAttribute attribute) {
  if (getters && getters->version_tag != 0) {
    const AttributeGetter& getter = getters->getters[attribute];
    if (getter.get) return getter.get(tensor, getter.closure);
  }
  return PyObject_GetAttr(tensor, attributeName(attribute));
}

// Fills types.dtypes from types.dtype_codes; false with a Python error set
// where a code is not an int.
bool tabulateDtypes(TorchTypes& types) {
  types.dtype_count = -1;
  types.last_dtype = 0;
  if (PyDict_GET_SIZE(types.dtype_codes) > kMaxDtypes) return true;  // looked up in the dict instead
  Py_ssize_t position = 0;
  PyObject* dtype = nullptr;
  PyObject* code = nullptr;
  int count = 0;
  while (PyDict_Next(types.dtype_codes, &position, &dtype, &code)) {
    const long value = PyLong_AsLong(code);
    if (value == -1 && PyErr_Occurred()) return false;
    types.dtypes[count++] = {dtype, static_cast<int32_t>(value < 0 ? -1 : value)};  // < 0: not carried
  }
  types.dtype_count = count;
  return true;
}

// The request dtype code of `dtype`, or -1 for one the core does not carry;
// -2 with a Python error set.
long dtypeCode(PyObject* dtype, TorchTypes& types) {
  if (types.dtype_count >= 0) {
    const DtypeCode& last = types.dtypes[types.last_dtype];
    if (types.last_dtype < types.dtype_count && last.dtype == dtype) return last.code;
    for (int i = 0; i < types.dtype_count; ++i) {
      if (types.dtypes[i].dtype != dtype) continue;
      types.last_dtype = i;  // a training loop's tensors mostly share one dtype
      return types.dtypes[i].code;
    }
    return -1;
  }
  PyObject* code = PyDict_GetItemWithError(types.dtype_codes, dtype);  // borrowed
  if (!code) return PyErr_Occurred() ? -2 : -1;
  const long value = PyLong_AsLong(code);
  if (value < 0) PyErr_Clear();
  return value < 0 ? -1 : value;
}

// set_torch_types(tensor_types, dtype_codes, empty_like, from_core_output, binding)
PyObject* setTorchTypes(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5 || !PyTuple_Check(args[0]) || !PyDict_Check(args[1]) || !PyCallable_Check(args[2]) ||
      !PyCallable_Check(args[3]) || !PyUnicode_CheckExact(args[4])) {
    PyErr_SetString(PyExc_TypeError,
                    "set_torch_types(tensor_types: tuple, dtype_codes: dict, empty_like, from_core_output, "
                    "binding: str)");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[0]); ++i) {
    if (!PyType_Check(PyTuple_GET_ITEM(args[0], i))) {
      PyErr_SetString(PyExc_TypeError, "set_torch_types(): tensor_types must be a tuple of types");
      return nullptr;
    }
  }
  auto& types = torchTypes();
  PyObject** fields[] = {&types.tensor_types, &types.dtype_codes, &types.empty_like, &types.from_core_output,
                         &types.binding};
  for (int i = 0; i < 5; ++i) {
    Py_INCREF(args[i]);
    Py_XSETREF(*fields[i], args[i]);
  }
  if (!tabulateDtypes(types)) return nullptr;
  for (int i = 0; i < kMaxTensorTypes; ++i) {
    TypeGetters& entry = types.type_getters[i];
    entry = TypeGetters{};
    if (i >= PyTuple_GET_SIZE(types.tensor_types)) continue;
    entry.type = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(types.tensor_types, i));
    lookUpGetters(entry);
  }
  Py_RETURN_NONE;
}

constexpr int kMaxTorchDims = 16;

// One tensor as the request takes it; `tensor` and `dtype_object` are borrowed
// from the caller's arguments.
struct TensorView {
  PyObject* tensor = nullptr;
  PyObject* dtype_object = nullptr;
  void* data = nullptr;
  int32_t dtype = -1;
  int32_t ndim = 0;
  int64_t dims[kMaxTorchDims];  // the first ndim
};

// Whether `object` is exactly one of the registered tensor types; `getters`:
// its type's (null past the first kMaxTensorTypes).
bool isRegisteredTensor(PyObject* object, TorchTypes& types, const TypeGetters*& getters) {
  getters = gettersOf(object, types);
  if (getters) return true;
  if (!types.tensor_types) return false;
  for (Py_ssize_t i = kMaxTensorTypes; i < PyTuple_GET_SIZE(types.tensor_types); ++i) {
    if (reinterpret_cast<PyObject*>(Py_TYPE(object)) == PyTuple_GET_ITEM(types.tensor_types, i)) return true;
  }
  return false;
}

// Reads a boolean attribute; -1 with a Python error set.
int boolAttribute(PyObject* tensor, const TypeGetters* getters, TensorAttribute attribute) {
  PyObject* value = readAttribute(tensor, getters, attribute);
  if (!value) return -1;
  const int truth = value == Py_True;
  Py_DECREF(value);
  return truth;
}

// Note [Contiguous without is_contiguous() for one element]
// is_contiguous() is the dearest of torch's getters here (about 630
// instructions with the call around it, callgrind: its argument parser for
// memory_format), and training code's smallest tensors (a loss, a counter,
// a 4-byte allreduce_) have one element. torch decides contiguity from
// sizes and strides alone, skipping every dimension of size 1
// (TensorImpl::compute_contiguous), and calls a tensor of no element
// contiguous: so a strided tensor of at most one element is contiguous
// whatever its strides. Its layout is not asked either (the layout getter
// cost about 250 of a 4-byte allreduce_'s ~10,300, callgrind): every layout
// but torch.strided keeps its values outside a storage of its own (sparse
// COO, CSR, CSC, BSR, BSC and MKL-DNN tensors have none; a nested tensor's
// shape getter raises, and the jagged layout is a subclass, declined as
// such), and data_ptr(), read last, raises for a tensor without storage
// ("Cannot access data pointer of Tensor that doesn't have storage"), which
// sends it to Python, as is_contiguous() sends it; a larger tensor asks
// is_contiguous() as before. The shape is read first, for the count of
// elements.

// Whether a tensor whose shape `view` holds is contiguous, given that its
// data_ptr() is read after (Note [Contiguous without is_contiguous() for one
// element]); is_contiguous() raising for a layout without strides means "not
// contiguous", for the Python path.
bool isContiguous(PyObject* tensor, const TensorView& view) {
  static PyObject* const is_contiguous_name = PyUnicode_InternFromString("is_contiguous");
  bool at_most_one = true;  // Note [Contiguous without is_contiguous() for one element]
  for (int32_t d = 0; d < view.ndim; ++d) {
    if (view.dims[d] == 0) {
      at_most_one = true;
      break;
    }
    if (view.dims[d] != 1) at_most_one = false;
  }
  if (at_most_one) return true;
  PyObject* contiguous = PyObject_CallMethodNoArgs(tensor, is_contiguous_name);
  if (!contiguous) {  // a layout without strides: the Python path says what is wrong
    PyErr_Clear();
    return false;
  }
  const bool truth = contiguous == Py_True;
  Py_DECREF(contiguous);
  return truth;
}

// Reads a tensor's shape into `view`; kForPython (nothing raised) for one
// torch cannot give (a nested tensor's) or of more than kMaxTorchDims
// dimensions.
Plainness readShape(PyObject* tensor, const TypeGetters* getters, TensorView& view) {
  PyObject* shape = readAttribute(tensor, getters, kShape);  // a torch.Size, a tuple
  if (!shape) {
    PyErr_Clear();
    return Plainness::kForPython;
  }
  const Py_ssize_t ndim = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : kMaxTorchDims + 1;
  for (Py_ssize_t i = 0; i < ndim && ndim <= kMaxTorchDims; ++i) {
    view.dims[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
  }
  Py_DECREF(shape);
  if (ndim > kMaxTorchDims) return Plainness::kForPython;
  if (PyErr_Occurred()) return Plainness::kFailed;
  view.ndim = static_cast<int32_t>(ndim);
  return Plainness::kPlain;
}

// Fills `view` from a contiguous CPU tensor of a carried dtype; kForPython
// (nothing raised) for anything else. With `new_output`, also for a tensor
// that requires grad: its result may need autograd's Function.
Plainness readTensor(PyObject* tensor, bool new_output, TorchTypes& types, TensorView& view) {
  static PyObject* const data_ptr_name = PyUnicode_InternFromString("data_ptr");
  const TypeGetters* getters = nullptr;
  if (!isRegisteredTensor(tensor, types, getters)) return Plainness::kForPython;
  const int cpu = boolAttribute(tensor, getters, kIsCpu);
  if (cpu != 1) return cpu < 0 ? Plainness::kFailed : Plainness::kForPython;
  if (new_output) {
    const int tracked = boolAttribute(tensor, getters, kRequiresGrad);
    if (tracked != 0) return tracked < 0 ? Plainness::kFailed : Plainness::kForPython;
  }
  PyObject* dtype = readAttribute(tensor, getters, kDtype);
  if (!dtype) return Plainness::kFailed;
  const long dtype_code = dtypeCode(dtype, types);
  Py_DECREF(dtype);  // where found, the dict's key keeps the dtype alive
  if (dtype_code < 0) return dtype_code == -2 ? Plainness::kFailed : Plainness::kForPython;
  const Plainness shape = readShape(tensor, getters, view);
  if (shape != Plainness::kPlain) return shape;
  if (!isContiguous(tensor, view)) return Plainness::kForPython;
  PyObject* pointer = PyObject_CallMethodNoArgs(tensor, data_ptr_name);
  if (!pointer) {  // no storage, so not strided (Note [Contiguous without is_contiguous() for one element])
    if (!PyErr_ExceptionMatches(PyExc_RuntimeError)) return Plainness::kFailed;
    PyErr_Clear();  // the Python path says what is wrong, in its own words
    return Plainness::kForPython;
  }
  view.data = PyLong_AsVoidPtr(pointer);
  Py_DECREF(pointer);
  if (PyErr_Occurred()) return Plainness::kFailed;
  view.tensor = tensor;
  view.dtype_object = dtype;
  view.dtype = static_cast<int32_t>(dtype_code);
  return Plainness::kPlain;
}

// The data pointer of a tensor torch.empty_like just made; null with a Python error set.
void* dataOf(PyObject* tensor) {
  static PyObject* const data_ptr_name = PyUnicode_InternFromString("data_ptr");
  PyObject* pointer = PyObject_CallMethodNoArgs(tensor, data_ptr_name);
  if (!pointer) return nullptr;
  void* data = PyLong_AsVoidPtr(pointer);
  Py_DECREF(pointer);
  return data;
}

// The collective's own arguments after (op, in_place, grouped, tensors,
// name, process_set), judged; kFailed with a Python error set.
Plainness plainArguments(int32_t op, PyObject* const* args, Py_ssize_t nargs, PlainReduction& plain,
                         int32_t& root_rank) {
  PyObject* name = args[4];
  PyObject* process_set = args[5];
  switch (op) {
    case HVDLITE_OP_ALLREDUCE:
      if (nargs != 10) break;
      return plainReduction(name, args[6], args[7], args[8], process_set, args[9], plain);
    case HVDLITE_OP_BROADCAST: {
      if (nargs != 7) break;
      if (!PyLong_CheckExact(args[6])) return Plainness::kForPython;  // int(root) is the Python path's
      const long root = PyLong_AsLong(args[6]);
      if (root < 0 || root > INT32_MAX) {
        PyErr_Clear();
        return Plainness::kForPython;  // the core's words for a bad root
      }
      root_rank = static_cast<int32_t>(root);
      return plainTarget(name, process_set, plain);
    }
    case HVDLITE_OP_ALLGATHER:
      if (nargs != 6) break;
      return plainTarget(name, process_set, plain);
    default:
      PyErr_Format(PyExc_ValueError, "tensor_call(): op %d is not allreduce, broadcast or allgather", op);
      return Plainness::kFailed;
  }
  PyErr_Format(PyExc_TypeError, "tensor_call(): wrong number of arguments (%zd) for op %d", nargs, op);
  return Plainness::kFailed;
}

// Per-member storage: one member inline, more on the heap, so that a
// single-tensor call (every small allreduce_) allocates nothing here.
template <typename T>
class Members {
 public:
  explicit Members(size_t count) : many_(count > 1 ? count : 0), count_(count) {}
  T& operator[](size_t i) { return count_ > 1 ? many_[i] : one_; }
  size_t size() const { return count_; }

 private:
  T one_{};
  std::vector<T> many_;
  size_t count_;
};

// Note [The in-place allreduce's own lane]
// One entry for four collectives cost allreduce_, the call training code
// makes most, 0.09 us (1.61 -> 1.70 us for 4 bytes at 2 ranks: the general
// body's per-member storage, held references, names and handles). So
// tensor_call looks first for allreduce_ of one tensor, and takes it straight
// to the request, the wait and the tensor itself, as numpy's allreduce_array
// does (allreduceInPlace); everything else goes the general way below. Both
// judge the same arguments with the same functions (plainReduction,
// readTensor), so a call goes to Python, or fails, alike on either.
PyObject* allreduceTensorInPlace(PyObject* const* args) {
  PyObject* tensor = args[3];
  PlainReduction plain;
  const Plainness arguments = plainReduction(args[4], args[6], args[7], args[8], args[5], args[9], plain);
  if (arguments != Plainness::kPlain) return notPlainResult(arguments);
  TensorView view;
  const Plainness read = readTensor(tensor, false, torchTypes(), view);
  if (read != Plainness::kPlain) return notPlainResult(read);
  return allreduceInPlace(tensor, plain, view.data, view.dtype, view.dims, view.ndim);
}

bool isInPlaceAllreduceOfOne(PyObject* const* args, Py_ssize_t nargs) {
  return nargs == 10 && args[1] == Py_True && args[2] == Py_False && PyLong_CheckExact(args[0]) &&
         PyLong_AsLong(args[0]) == HVDLITE_OP_ALLREDUCE;
}

// tensor_call(op, in_place, grouped, tensors, name, process_set, *arguments)
// -> the result, or None where the Python path must decide. `arguments`:
// allreduce (reduce_op, prescale, postscale, average), broadcast
// (root_rank), allgather (). Grouped: `tensors` is a list (one group named
// `name`, members "<name>.<index>"), and a list comes back.
PyObject* tensorCall(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 6) {
    PyErr_Format(PyExc_TypeError, "tensor_call() takes at least 6 arguments (%zd given)", nargs);
    return nullptr;
  }
  if (isInPlaceAllreduceOfOne(args, nargs)) return allreduceTensorInPlace(args);
  const long op = PyLong_AsLong(args[0]);
  if (op == -1 && PyErr_Occurred()) return nullptr;
  const bool in_place = args[1] == Py_True;
  const bool grouped = args[2] == Py_True;
  PyObject* given = args[3];
  if (grouped && !PyList_CheckExact(given)) Py_RETURN_NONE;
  const Py_ssize_t count = grouped ? PyList_GET_SIZE(given) : 1;
  auto& types = torchTypes();
  if (count == 0 || (in_place && op == HVDLITE_OP_ALLGATHER)) Py_RETURN_NONE;
  PlainReduction plain;
  int32_t root_rank = 0;
  const Plainness arguments = plainArguments(static_cast<int32_t>(op), args, nargs, plain, root_rank);
  if (arguments != Plainness::kPlain) return notPlainResult(arguments);
  Members<TensorView> views(static_cast<size_t>(count));
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* tensor = grouped ? PyList_GET_ITEM(given, i) : given;
    const Plainness read = readTensor(tensor, !in_place, types, views[static_cast<size_t>(i)]);
    if (read != Plainness::kPlain) return notPlainResult(read);
  }
  return raisingAsPython([&]() -> PyObject* {
    // Outputs: the tensors themselves in place, new ones for allreduce and
    // broadcast, the core's for allgather (made after the wait).
    // The inputs are held here too: a group's list could lose them to another
    // thread while this one waits without the GIL.
    Members<py::object> inputs(views.size());
    Members<py::object> outputs(views.size());
    Members<void*> output_data(views.size());
    for (size_t i = 0; i < views.size(); ++i) {
      inputs[i] = py::reinterpret_borrow<py::object>(views[i].tensor);
      if (in_place) {
        outputs[i] = py::reinterpret_borrow<py::object>(views[i].tensor);
        output_data[i] = views[i].data;
      } else if (op != HVDLITE_OP_ALLGATHER) {
        outputs[i] = py::reinterpret_steal<py::object>(PyObject_CallOneArg(types.empty_like, views[i].tensor));
        if (!outputs[i]) throw py::error_already_set();
        output_data[i] = dataOf(outputs[i].ptr());
        if (PyErr_Occurred()) throw py::error_already_set();
      }
    }
    std::vector<std::string> member_names;
    if (grouped) {
      for (Py_ssize_t i = 0; i < count; ++i) member_names.push_back(std::string(plain.name) + "." + std::to_string(i));
    }
    // Submitted together, then waited for in order; a failure is raised only
    // once every member has finished, as synchronize() does, so that no
    // output is handed back while the core may still write into it. One the
    // core refuses at submit raises at once (as the general path's).
    Members<std::shared_ptr<Handle>> handles(views.size());
    size_t submitted = 0;
    const int64_t scalar_shape = 1;
    for (size_t i = 0; i < views.size(); ++i) {
      const TensorView& view = views[i];
      hvdlite_request request = plainRequest(static_cast<int32_t>(op), plain, view.data, output_data[i], view.dtype,
                                             view.dims, view.ndim);
      if (grouped) request.name = member_names[i].c_str();
      if (op == HVDLITE_OP_ALLGATHER && view.ndim == 0) {  // a scalar is one row, as in the general path
        request.shape = &scalar_shape;
        request.ndim = 1;
      }
      request.root_rank = root_rank;
      if (grouped) {
        request.group = plain.name;
        request.group_size = static_cast<int32_t>(count);
      }
      try {
        handles[i] = submitOnly(request);
        ++submitted;
      } catch (...) {
        // The members before this one are queued and write into their
        // buffers whenever they end: those stay alive (leaked), not freed.
        for (size_t queued = 0; queued < submitted; ++queued) {
          inputs[queued].inc_ref();
          if (outputs[queued]) outputs[queued].inc_ref();
        }
        throw;
      }
    }
    std::unique_ptr<py::error_already_set> first_failure;
    for (size_t i = 0; i < views.size(); ++i) {
      try {
        finishWait(*handles[i]);
      } catch (py::error_already_set& failure) {
        if (!first_failure) first_failure = std::make_unique<py::error_already_set>(std::move(failure));
      }
    }
    if (first_failure) throw std::move(*first_failure);
    if (op == HVDLITE_OP_ALLGATHER) {
      for (size_t i = 0; i < views.size(); ++i) {
        Handle& done = *handles[i];
        size_t nbytes = dtypeSize(static_cast<DataType>(views[i].dtype));
        for (int64_t d : done.output_shape) nbytes *= static_cast<size_t>(d);
        py::object raw = toArray(std::move(done.output), nbytes);
        py::tuple shape(done.output_shape.size());
        for (size_t d = 0; d < done.output_shape.size(); ++d) shape[d] = py::int_(done.output_shape[d]);
        outputs[i] = py::reinterpret_steal<py::object>(PyObject_CallFunctionObjArgs(
            types.from_core_output, raw.ptr(), shape.ptr(), views[i].dtype_object, nullptr));
        if (!outputs[i]) throw py::error_already_set();
      }
    }
    if (!grouped) return outputs[0].release().ptr();
    PyObject* list = PyList_New(count);
    if (!list) throw py::error_already_set();
    for (Py_ssize_t i = 0; i < count; ++i) PyList_SET_ITEM(list, i, outputs[static_cast<size_t>(i)].release().ptr());
    return list;
  });
}

// Note [Asynchronous allreduce of a tensor in one call]
// DistributedOptimizer submits every gradient with allreduce_async_ and
// synchronizes them all at step(), so a step of many small gradients paid
// the Python general path per tensor (tensor_name, reduction, _prepare,
// enqueue's keywords, the handle table: about 1.5 us a submission).
// allreduce_tensor_async is Note [Asynchronous allreduce of an array in one
// call] (bind_collectives.cc) for torch: it judges the arguments as
// tensor_call does (the same readTensor, plainReduction), makes the output
// (the tensor itself in place, torch.empty_like otherwise), submits, and
// adds to the handle table what the general path adds for a host tensor:
// ((entry,), table.written, (tensor, output)) under hvdlite.torch's name,
// from C (Note [The handle table's common cases in C] in handle_table.cc),
// and returns the handle. The payload keeps the tensor and the output alive
// until synchronize(), which, like poll(), cannot tell the two paths'
// handles apart. None, having done nothing, for anything the general path
// must judge (CUDA, a tensor autograd tracks when a new output is made,
// average=, Adasum, integer scales, a process set given as None...).
//
// allreduce_tensor_async(in_place, tensor, name, op, prescale, postscale,
// process_set, average) -> handle or None
PyObject* allreduceTensorAsync(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 8) {
    PyErr_Format(PyExc_TypeError, "allreduce_tensor_async() takes 8 arguments (%zd given)", nargs);
    return nullptr;
  }
  const bool in_place = args[0] == Py_True;
  PyObject* tensor = args[1];
  PlainReduction plain;
  const Plainness arguments = plainReduction(args[2], args[3], args[4], args[5], args[6], args[7], plain);
  if (arguments != Plainness::kPlain) return notPlainResult(arguments);
  auto& types = torchTypes();
  TensorView view;
  const Plainness read = readTensor(tensor, !in_place, types, view);
  if (read != Plainness::kPlain) return notPlainResult(read);
  // Everything that can fail is made before the submit: once the core holds
  // the buffers, the handle table's entry is all that keeps them alive.
  PyObject* handle = reserveHandle();
  if (!handle) return nullptr;
  PyObject* output = tensor;
  void* output_data = view.data;
  if (in_place) {
    Py_INCREF(output);
  } else {
    output = PyObject_CallOneArg(types.empty_like, tensor);
    if (!output) {
      Py_DECREF(handle);
      return nullptr;
    }
    output_data = dataOf(output);
    if (!output_data && PyErr_Occurred()) {
      Py_DECREF(handle);
      Py_DECREF(output);
      return nullptr;
    }
  }
  PyObject* payload = PyTuple_New(2);
  PyObject* entries = PyTuple_New(1);
  if (!payload || !entries) {
    Py_DECREF(handle);
    Py_DECREF(output);
    Py_XDECREF(payload);
    Py_XDECREF(entries);
    return nullptr;
  }
  Py_INCREF(tensor);
  PyTuple_SET_ITEM(payload, 0, tensor);  // steals
  PyTuple_SET_ITEM(payload, 1, output);
  PyObject* entry = raisingAsPython([&]() -> PyObject* {
    hvdlite_request request =
        plainRequest(HVDLITE_OP_ALLREDUCE, plain, view.data, output_data, view.dtype, view.dims, view.ndim);
    return submitForTable(request);
  });
  if (!entry) {  // nothing submitted (submitForTable fails only before the core has the buffers)
    Py_DECREF(handle);
    Py_DECREF(payload);
    Py_DECREF(entries);
    return nullptr;
  }
  PyTuple_SET_ITEM(entries, 0, entry);
  const bool added = addToHandleTable(handle, types.binding, entries, writtenFinish(), payload);
  Py_DECREF(entries);
  Py_DECREF(payload);
  if (!added) {
    Py_DECREF(handle);
    return nullptr;
  }
  return handle;
}

}  // namespace

void bindTorchCalls(py::module_& m) {
  addPlainFunction(m, "tensor_call", tensorCall,
      "tensor_call(op, in_place, grouped, tensors, name, process_set, *arguments) -> result or None\n\n"
      "hvdlite.torch's synchronous allreduce, broadcast and allgather (of one tensor, or of a list as one "
      "group) in one call for contiguous CPU tensors and the common arguments (Note [Torch collectives in "
      "one call]); arguments: allreduce (reduce_op, prescale, postscale, average), broadcast (root_rank), "
      "allgather (). Returns None, having done nothing, where the Python path must decide. Needs "
      "set_torch_types() first.");
  addPlainFunction(m, "allreduce_tensor_async", allreduceTensorAsync,
      "allreduce_tensor_async(in_place, tensor, name, op, prescale, postscale, process_set, average) -> "
      "handle or None\n\n"
      "hvdlite.torch's allreduce_async(_) of a contiguous CPU tensor in one call (Note [Asynchronous allreduce "
      "of a tensor in one call]): submits, adds the operation to the handle table and returns its handle; None, "
      "having done nothing, where the Python path must decide. Needs set_torch_types() and set_handle_table() "
      "first.");
  addPlainFunction(m, "set_torch_types", setTorchTypes,
      "set_torch_types(tensor_types, dtype_codes, empty_like, from_core_output, binding)\n\nThe "
      "tensor types tensor_call takes (a tuple: exactly these, no subclass), {torch.dtype: request dtype code}, "
      "the functions that make its new outputs, and the binding's name for its handle table entries.");
}

}  // namespace hvdlite::python
