// The request the api tests start from: an allreduce (sum) of a 2x3 float32
// tensor in place in `data`, which must hold 6 floats.
#pragma once

#include <cstdint>

#include "api/api.h"

namespace hvdlite::testing {

inline hvdlite_request sampleAllreduce(const char* name, float* data) {
  static const int64_t kShape[] = {2, 3};
  hvdlite_request r = hvdlite_request_defaults();
  r.op = HVDLITE_OP_ALLREDUCE;
  r.name = name;
  r.dtype = HVDLITE_DTYPE_FLOAT32;
  r.shape = kShape;
  r.ndim = 2;
  r.input = data;
  r.output = data;
  r.reduce_op = HVDLITE_REDUCE_SUM;
  return r;
}

}  // namespace hvdlite::testing
