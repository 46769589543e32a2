// Bridges one TF AsyncOpKernel invocation to an hvdlite collective through the
// C interface of api/api.h: builds the request, gives the core TF's allocator
// for outputs sized after negotiation, and finishes the kernel (status, extra
// outputs, done()) from the core's completion callback.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "api/api.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace hvdlite::tensorflow_ops {

// hvdlite's dtype code (api.h's HVDLITE_DTYPE_*) for a TF dtype, or -1 when
// hvdlite cannot carry it.
int32_t hvdliteDtype(::tensorflow::DataType dtype);

// A request pre-filled from a tensor (dtype, shape, data pointer).
hvdlite_request requestFor(const ::tensorflow::Tensor& tensor, int32_t op,
                           const std::string& name, int32_t process_set_id);

// The op's call_site attribute ([file, line, function], or [] when unknown),
// read once when the kernel is built, and put into each of its requests.
class TracedCallSite {
 public:
  ::tensorflow::Status read(::tensorflow::OpKernelConstruction* context);
  void apply(hvdlite_request* request) const;

 private:
  std::string file_, function_;
  int32_t line_ = 0;
};

// Runs after a successful collective, on the background thread, before done():
// fills outputs that depend on the result (alltoall's received splits).
using ResultHandler = std::function<::tensorflow::Status(::tensorflow::OpKernelContext*,
                                                         const hvdlite_result&)>;

// Queues `request` for `context`. `output_index` >= 0: outputs sized by the
// core are allocated there. Calls done() exactly once, with the status. The
// op holds its step until then, so the request says its caller waits
// (Note [Divergence] in core/coordinator.cc).
void enqueueCollective(::tensorflow::OpKernelContext* context, const hvdlite_request& request,
                       int output_index, ResultHandler on_result,
                       ::tensorflow::AsyncOpKernel::DoneCallback done);

// Fails the kernel with an error naming what is wrong when hvdlite is not
// initialized; true when it is.
bool requireInitialized(::tensorflow::OpKernelContext* context,
                        const ::tensorflow::AsyncOpKernel::DoneCallback& done);

}  // namespace hvdlite::tensorflow_ops
