// Where a kernel's tensors live, said in the request: host memory for a CPU
// kernel; for a GPU kernel (Note [TF GPU kernels]) the GPU and TF's compute
// stream, read through stream-executor's interface, so that one source
// compiles against tensorflow-cpu (no CUDA headers) and a CUDA build alike.
#pragma once

#include "api/api.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace hvdlite::tensorflow_ops {

// Note [TF GPU kernels]
// Every hvdlite op has a DEVICE_GPU kernel besides its DEVICE_CPU one, the
// same class: a GPU tensor is handed to the core where it lies (NCCL), not
// copied to the host and back around each collective. What differs:
//   * the request carries the GPU and TF's compute stream (Placement); the
//     core records the ready event on that stream at enqueue, on the calling
//     thread (Note [Ready at enqueue] in transport/device_communicator.h), so
//     request.ready_event stays NULL;
//   * completion: for a request with device >= 0 the C API makes its stream
//     wait on the batch's done event BEFORE it calls done (Note [Completion on
//     the consumer's stream]), so TF's later kernels on that stream, and the
//     copies TF orders after it, read the result after NCCL wrote it, and TF
//     reuses the inputs' memory only after NCCL read them. The kernel's done()
//     needs no wait of its own;
//   * outputs sized after negotiation come from TF's GPU allocator on the
//     core's thread (Note [TF outputs allocated late] in pending_op.cc);
//   * whatever the kernel reads or writes on the host is HostMemory in its
//     registration: alltoall's splits and received splits, join's last rank,
//     the topology ops' scalars. Barrier and join carry no tensor, so their
//     requests stay host requests.
// No #ifdef: the registrations compile against tensorflow-cpu's headers, and
// a TF without GPUs never instantiates them.
struct Placement {
  int32_t device = -1;     // api.h: -1 host memory, else the CUDA device ordinal
  void* stream = nullptr;  // cudaStream_t of TF's compute stream for this op

  void apply(hvdlite_request* request) const {
    request->device = device;
    request->stream = stream;
  }
};

// The placement of the tensors of the kernel running in `context`: host for
// a CPU kernel; for a GPU kernel its GPU and compute stream, or an error
// naming `what` when TF gave the kernel no stream.
::tensorflow::Status placementOf(::tensorflow::OpKernelContext* context, const std::string& what,
                                 Placement* placement);

}  // namespace hvdlite::tensorflow_ops
