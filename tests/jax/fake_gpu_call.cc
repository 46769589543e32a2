// A test's door into what hvdlite's XLA custom calls run once XLA has handed
// over their buffers (csrc/jax/collective_call.h), without XLA: the CUDA
// handler's requests, its ordering on "XLA's" stream and its shape checks
// can then run on the fake GPU (tests/jax/test_jax_cuda_fake.py), where no
// CUDA build of jaxlib exists. One-dimensional arrays of one dtype.
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "jax/collective_call.h"

extern "C" int32_t hvdlite_test_jax_call(int32_t op, int32_t dtype, int32_t element_bytes, int32_t count,
                                         const void* const* inputs, void* const* outputs, const int64_t* rows,
                                         const int64_t* output_rows, const char* packed_names,
                                         int32_t reduce_op, double prescale, double postscale, int32_t device,
                                         void* stream, char* error, size_t error_size) {
  using namespace hvdlite::jax_ffi;
  std::vector<std::string_view> names;
  if (!unpackNames(packed_names, &names) || names.size() != static_cast<size_t>(count)) return -1;
  CallAttributes attributes;
  attributes.op = op;
  attributes.reduce_op = reduce_op;
  attributes.prescale = prescale;
  attributes.postscale = postscale;
  std::vector<CallArray> arrays(count);
  for (int32_t i = 0; i < count; ++i) {
    arrays[i].name = names[i];
    arrays[i].dtype = dtype;
    arrays[i].shape = {rows[i]};
    arrays[i].input = inputs[i];
    arrays[i].output = outputs[i];
    arrays[i].output_shape = {output_rows[i]};
    arrays[i].element_bytes = static_cast<size_t>(element_bytes);
  }
  CallOutcome outcome = runCall(attributes, arrays, Placement{device, stream});
  std::strncpy(error, outcome.error.c_str(), error_size - 1);
  error[error_size - 1] = '\0';
  return outcome.status;
}
