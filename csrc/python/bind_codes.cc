// The codes of api.h (Note [Codes defined once]) as {name: value} dicts, from
// which hvdlite/common/ops.py builds OpType, ReduceOp and DataType, and the
// NumPy dtypes the core carries (Note [One NumPy dtype table] in numpy_dtypes.h).
#include "api/api.h"
#include "python/bind.h"
#include "python/numpy_dtypes.h"

namespace py = pybind11;

namespace hvdlite::python {

void bindCodes(py::module_& m) {
  py::dict op_types, reduce_ops, data_types;
#define HVDLITE_EXPORT_CODE(codes, name, value) codes[#name] = static_cast<int>(value);
#define HVDLITE_EXPORT_OP(name, value) HVDLITE_EXPORT_CODE(op_types, name, value)
#define HVDLITE_EXPORT_REDUCE(name, value) HVDLITE_EXPORT_CODE(reduce_ops, name, value)
#define HVDLITE_EXPORT_DTYPE(name, value) HVDLITE_EXPORT_CODE(data_types, name, value)
  HVDLITE_OP_TYPES(HVDLITE_EXPORT_OP)
  HVDLITE_REDUCE_OPS(HVDLITE_EXPORT_REDUCE)
  HVDLITE_DTYPES(HVDLITE_EXPORT_DTYPE)
#undef HVDLITE_EXPORT_DTYPE
#undef HVDLITE_EXPORT_REDUCE
#undef HVDLITE_EXPORT_OP
#undef HVDLITE_EXPORT_CODE
  m.attr("op_types") = op_types;
  m.attr("reduce_ops") = reduce_ops;
  m.attr("data_types") = data_types;
  // Note [One NumPy dtype table] in numpy_dtypes.h: {np.dtype name: dtype code}.
  py::dict numpy_dtypes;
#define HVDLITE_EXPORT_NUMPY_DTYPE(number, name, code) numpy_dtypes[#name] = static_cast<int>(HVDLITE_DTYPE_##code);
  HVDLITE_NUMPY_DTYPES(HVDLITE_EXPORT_NUMPY_DTYPE)
#undef HVDLITE_EXPORT_NUMPY_DTYPE
  m.attr("numpy_dtypes") = numpy_dtypes;
  // For a test's ctypes copy of the struct, which must not fall behind it:
  // the core reads every field (tests/common/workers/bad_requests.py).
  m.attr("request_size") = sizeof(hvdlite_request);
}

}  // namespace hvdlite::python
