#include "pending_op.h"

#include <cstdlib>
#include <memory>
#include <utility>

#include "device_placement.h"

namespace hvdlite::tensorflow_ops {
namespace tf = ::tensorflow;

namespace {

// What the core's callbacks need; owned by the core from enqueue to done.
struct PendingOp {
  tf::OpKernelContext* context;
  int output_index;
  ResultHandler on_result;
  tf::AsyncOpKernel::DoneCallback done;
  bool on_device = false;  // a GPU kernel's request (Note [TF GPU kernels])
  tf::Status allocation_status;
  // Where the core writes when TF could not allocate host memory, so the
  // collective still completes on every rank; the error is reported at
  // completion. (On a GPU a NULL answer does that: Note [Allocation failures]
  // in core/device_executor.cc.)
  std::vector<char> scratch;
  char empty = 0;  // a non-NULL address for zero-sized outputs, never read or written
};

// Note [TF outputs allocated late]
// An allgather's or alltoall's output size is known only after negotiation,
// so the core calls allocateOutput on its background thread (a reducescatter's
// on the enqueueing thread, Runtime::allocateAtEnqueue), and the kernel takes
// the memory from TF with allocate_output, as Horovod does. This is sound:
//   * the OpKernelContext is the kernel's until done(); TF's executor does not
//     touch it meanwhile, and TF's allocators (BFC for the GPU, the CPU one)
//     are thread-safe;
//   * on a GPU kernel allocate_output gives GPU memory (the output is not
//     HostMemory) from TF's allocator, which NCCL writes on the core's
//     stream, and TF's stream reads only after waiting on the batch's done
//     event (Note [Completion on the consumer's stream]);
//   * TF's allocator is ordered by TF's compute stream alone: a block TF freed
//     may still be used by kernels queued on that stream. So a GPU request
//     says HVDLITE_REQUEST_OUTPUT_ON_STREAM, and the core makes its stream
//     wait, on the GPU, for TF's stream as it was when the allocation
//     returned (Note [Outputs allocated late] in api/session.cc), as
//     Horovod's ops do with an event; no thread waits.
void* allocateOutput(void* user, const int64_t* dims, int32_t ndim) {
  auto* pending = static_cast<PendingOp*>(user);
  tf::TensorShape shape;
  for (int32_t i = 0; i < ndim; ++i) shape.AddDim(dims[i]);
  tf::Tensor* output = nullptr;
  pending->allocation_status = pending->context->allocate_output(pending->output_index, shape, &output);
  if (pending->on_device) {
    if (!pending->allocation_status.ok()) return nullptr;
  } else if (!pending->allocation_status.ok()) {
    auto dtype = pending->context->expected_output_dtype(pending->output_index);
    pending->scratch.resize(shape.num_elements() * tf::DataTypeSize(dtype) + 1);
    return pending->scratch.data();
  }
  void* data = const_cast<char*>(output->tensor_data().data());
  return data ? data : &pending->empty;
}

// TensorFlow's error types, as Horovod raises them: bad arguments are
// InvalidArgumentError, ranks that disagree on a collective are
// FailedPreconditionError; a run-time failure (lost peer, stall, shutdown) is
// InternalError, which hvdlite.tensorflow also raises as HvdliteInternalError.
tf::Status toStatus(int32_t code, const char* message) {
  switch (code) {
    case HVDLITE_OK: return tf::Status();
    case HVDLITE_INVALID_ARGUMENT: return tf::errors::InvalidArgument(message);
    case HVDLITE_PRECONDITION_ERROR: return tf::errors::FailedPrecondition(message);
    default: return tf::errors::Internal(message);
  }
}

// For a GPU request, the C API made TF's stream wait on the batch's done
// event before calling this (Note [TF GPU kernels]): done() needs no wait.
void finish(void* user, const hvdlite_result* result) {
  std::unique_ptr<PendingOp> pending(static_cast<PendingOp*>(user));
  tf::Status status = toStatus(result->status, result->message);
  if (status.ok()) status = pending->allocation_status;
  if (status.ok() && pending->on_result) status = pending->on_result(pending->context, *result);
  pending->context->SetStatus(status);
  pending->done();
}

}  // namespace

int32_t hvdliteDtype(tf::DataType dtype) {
  switch (dtype) {
    case tf::DT_UINT8: return HVDLITE_DTYPE_UINT8;
    case tf::DT_INT8: return HVDLITE_DTYPE_INT8;
    case tf::DT_INT32: return HVDLITE_DTYPE_INT32;
    case tf::DT_INT64: return HVDLITE_DTYPE_INT64;
    case tf::DT_HALF: return HVDLITE_DTYPE_FLOAT16;
    case tf::DT_BFLOAT16: return HVDLITE_DTYPE_BFLOAT16;
    case tf::DT_FLOAT: return HVDLITE_DTYPE_FLOAT32;
    case tf::DT_DOUBLE: return HVDLITE_DTYPE_FLOAT64;
    case tf::DT_BOOL: return HVDLITE_DTYPE_BOOL;
    case tf::DT_INT16: return HVDLITE_DTYPE_INT16;
    case tf::DT_UINT16: return HVDLITE_DTYPE_UINT16;
    default: return -1;
  }
}

hvdlite_request requestFor(const tf::Tensor& tensor, int32_t op, const std::string& name,
                           int32_t process_set_id) {
  hvdlite_request request = hvdlite_request_defaults();
  request.op = op;
  request.name = name.c_str();
  request.dtype = hvdliteDtype(tensor.dtype());
  request.input = tensor.tensor_data().data();
  request.process_set_id = process_set_id;
  return request;
}

tf::Status TracedCallSite::read(tf::OpKernelConstruction* context) {
  std::vector<std::string> site;
  TF_RETURN_IF_ERROR(context->GetAttr("call_site", &site));
  if (site.size() != 3) return tf::Status();  // [] (or a graph from elsewhere): unknown
  file_ = site[0];
  line_ = static_cast<int32_t>(std::strtol(site[1].c_str(), nullptr, 10));
  function_ = site[2];
  return tf::Status();
}

void TracedCallSite::apply(hvdlite_request* request) const {
  if (file_.empty()) return;
  request->call_site_file = file_.c_str();
  request->call_site_line = line_;
  request->call_site_function = function_.c_str();
}

bool requireInitialized(tf::OpKernelContext* context, const tf::AsyncOpKernel::DoneCallback& done) {
  if (hvdlite_is_initialized()) return true;
  context->SetStatus(tf::errors::FailedPrecondition(
      "hvdlite has not been initialized; call hvdlite.tensorflow.init() before running hvdlite ops"));
  done();
  return false;
}

void enqueueCollective(tf::OpKernelContext* context, const hvdlite_request& request, int output_index,
                       ResultHandler on_result, tf::AsyncOpKernel::DoneCallback done) {
  auto pending = std::make_unique<PendingOp>();
  pending->context = context;
  pending->output_index = output_index;
  pending->on_result = std::move(on_result);
  pending->done = std::move(done);
  pending->on_device = request.device >= 0;
  hvdlite_request waited = request;
  waited.flags |= HVDLITE_REQUEST_CALLER_WAITS;
  if (pending->on_device) waited.flags |= HVDLITE_REQUEST_OUTPUT_ON_STREAM;  // Note [TF outputs allocated late]
  char error[1024];
  int32_t code = hvdlite_enqueue(&waited, output_index >= 0 ? allocateOutput : nullptr, finish,
                                 pending.get(), error, sizeof(error));
  if (code == HVDLITE_OK) {
    pending.release();  // the core's finish() owns it now
    return;
  }
  // A GPU reducescatter allocates in the call: TF's reason is the better one.
  tf::Status refused = pending->allocation_status.ok() ? toStatus(code, error) : pending->allocation_status;
  context->SetStatus(refused);
  pending->done();
}

}  // namespace hvdlite::tensorflow_ops
