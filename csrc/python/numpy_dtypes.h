// The NumPy dtypes the core carries, in one table.
#pragma once

#include <cstdint>

#include "api/api.h"

// Note [One NumPy dtype table]
// Each NumPy dtype hvdlite carries, once: NumPy's type number (its C enum
// NPY_TYPES, part of NumPy's stable ABI), the name np.dtype() takes, and the
// request's code. hvdlite._codes exports {name: code} (bind_codes.cc), from
// which hvdlite/numpy/collectives.py builds the table its general path looks
// dtypes up in; the one-call paths of bind_collectives.cc read an array's type
// number off its C struct and look it up here (dtypeOfNumpy). bfloat16 is no
// NumPy type: ml_dtypes registers it at run time under a number of its own,
// so it has none here (kNoTypeNumber) and the one-call paths leave it to
// Python, whose table maps the name to ml_dtypes' dtype. int64 is NumPy's
// `long` on LP64 Linux; `longlong` (type 9) is the same width, and some
// libraries hand out arrays of it.
#define HVDLITE_NUMPY_DTYPES(X) \
  X(0, bool, BOOL)              \
  X(1, int8, INT8)              \
  X(2, uint8, UINT8)            \
  X(3, int16, INT16)            \
  X(4, uint16, UINT16)          \
  X(5, int32, INT32)            \
  X(7, int64, INT64)            \
  X(9, longlong, INT64)         \
  X(11, float32, FLOAT32)       \
  X(12, float64, FLOAT64)       \
  X(23, float16, FLOAT16)       \
  X(-1, bfloat16, BFLOAT16)

namespace hvdlite::python {

inline constexpr int kNoTypeNumber = -1;

// The request's dtype code of a NumPy type number; -1 when not carried here.
inline int32_t dtypeOfNumpy(int type_num) {
  if (type_num == kNoTypeNumber) return -1;
#define HVDLITE_NUMPY_DTYPE_CASE(number, name, code) \
  if (type_num == (number)) return HVDLITE_DTYPE_##code;
  HVDLITE_NUMPY_DTYPES(HVDLITE_NUMPY_DTYPE_CASE)
#undef HVDLITE_NUMPY_DTYPE_CASE
  return -1;
}

}  // namespace hvdlite::python
