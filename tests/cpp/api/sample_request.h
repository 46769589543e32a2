// The request the api tests start from: an allreduce (sum) of a 2x3 float32
// tensor in place in `data`, which must hold 6 floats; and a completion
// callback that counts its calls and keeps the last status.
#pragma once

#include <atomic>
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

// hvdlite_enqueue's callback: `user` is a Done.
struct Done {
  std::atomic<int> calls{0};
  std::atomic<int> status{-1};
};

inline void onDone(void* user, const hvdlite_result* result) {
  auto* done = static_cast<Done*>(user);
  done->status = result->status;
  ++done->calls;
}

}  // namespace hvdlite::testing
