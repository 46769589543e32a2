#include "device_placement.h"

#include "tensorflow/core/framework/device_base.h"
#include "xla/stream_executor/stream.h"

namespace hvdlite::tensorflow_ops {
namespace tf = ::tensorflow;

namespace {

// TF's stream for the kernel's work on its GPU; null for a CPU kernel, which
// has no accelerator info.
stream_executor::Stream* computeStream(tf::OpKernelContext* context) {
  if (!context->device()->tensorflow_accelerator_device_info()) return nullptr;
  tf::DeviceContext* device_context = context->op_device_context();
  return device_context ? device_context->stream() : nullptr;
}

}  // namespace

tf::Status placementOf(tf::OpKernelContext* context, const std::string& what, Placement* placement) {
  *placement = Placement();
  const auto* info = context->device()->tensorflow_accelerator_device_info();
  if (!info) return tf::Status();  // a CPU kernel: host memory
  // gpu_id is the PLATFORM device id (TF sets it from TfToPlatformDeviceId),
  // the CUDA ordinal that cudaSetDevice takes in this process, which is what
  // the core does with request.device. It is not the N of "/GPU:N": after
  // tf.config.set_visible_devices(gpus[local_rank], "GPU"), Horovod's usual
  // pinning, "/GPU:0" is the platform GPU local_rank. (The stream's executor
  // reports the same number as device_ordinal().)
  placement->device = info->gpu_id;
  stream_executor::Stream* stream = computeStream(context);
  // The CUstream TF's stream-executor made in the device's primary context,
  // the one the CUDA runtime (and so the core) uses: a cudaStream_t here.
  placement->stream = stream ? stream->platform_specific_handle().stream : nullptr;
  if (placement->device < 0 || !placement->stream) {
    return tf::errors::Internal(what, ": TensorFlow ran hvdlite's GPU kernel without a GPU stream (device ",
                                context->device()->name(), ", GPU id ", info->gpu_id,
                                "); this TensorFlow's GPU device is not one hvdlite can use, so place "
                                "the op on the CPU (with tf.device('/CPU:0'))");
  }
  return tf::Status();
}

}  // namespace hvdlite::tensorflow_ops
