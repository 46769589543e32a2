// The AsyncOpKernels of the ops in op_definitions.cc. Each one turns its
// inputs into an hvdlite request and returns at once; the core's background
// thread finishes the kernel (pending_op.cc), so TF's executor threads never
// block on other ranks. Each class serves both devices: on a GPU the request
// also carries the GPU and TF's stream (Note [TF GPU kernels] in
// device_placement.h).
#include <memory>
#include <string>
#include <vector>

#include "api/api.h"
#include "collective_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace hvdlite::tensorflow_ops {
namespace tf = ::tensorflow;
using DoneCallback = tf::AsyncOpKernel::DoneCallback;

namespace {

constexpr char kAllreduce[] = "allreduce";
constexpr char kAllgather[] = "allgather";
constexpr char kReducescatter[] = "reducescatter";
using AllreduceKernel = KernelOf<SingleKernel, HVDLITE_OP_ALLREDUCE, kAllreduce, Outputs::kLikeInputs, true>;
using AllgatherKernel = KernelOf<SingleKernel, HVDLITE_OP_ALLGATHER, kAllgather, Outputs::kSizedByCore, false>;
using ReducescatterKernel =
    KernelOf<SingleKernel, HVDLITE_OP_REDUCESCATTER, kReducescatter, Outputs::kSizedByCore, true>;

class BroadcastKernel : public SingleKernel {
 public:
  explicit BroadcastKernel(tf::OpKernelConstruction* c)
      : SingleKernel(c, HVDLITE_OP_BROADCAST, "broadcast", Outputs::kLikeInputs, false) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
  }

 protected:
  void addFields(tf::OpKernelContext*, hvdlite_request* request) const override {
    request->root_rank = root_rank_;
  }

 private:
  int32_t root_rank_ = 0;
};

class AlltoallKernel : public SingleKernel {
 public:
  explicit AlltoallKernel(tf::OpKernelConstruction* c)
      : SingleKernel(c, HVDLITE_OP_ALLTOALL, "alltoall", Outputs::kSizedByCore, false) {}

 protected:
  void addFields(tf::OpKernelContext* c, hvdlite_request* request) const override {
    auto split_values = c->input(1).flat<int64_t>();  // HostMemory on a GPU
    request->splits = split_values.data();
    request->num_splits = static_cast<int32_t>(split_values.size());
  }
  ResultHandler resultHandler() const override { return writeReceivedSplits; }

 private:
  static tf::Status writeReceivedSplits(tf::OpKernelContext* c, const hvdlite_result& result) {
    tf::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(1, tf::TensorShape({result.num_received_splits}), &out));
    auto flat = out->flat<int32_t>();  // int32, as Horovod returns them; HostMemory on a GPU
    for (int32_t i = 0; i < result.num_received_splits; ++i) {
      flat(i) = static_cast<int32_t>(result.received_splits[i]);
    }
    return tf::Status();
  }
};

class BarrierKernel : public tf::AsyncOpKernel {
 public:
  explicit BarrierKernel(tf::OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
    OP_REQUIRES_OK(c, site_.read(c));
  }
  void ComputeAsync(tf::OpKernelContext* c, DoneCallback done) override {
    if (!requireInitialized(c, done)) return;
    hvdlite_request request = hvdlite_request_defaults();
    request.op = HVDLITE_OP_BARRIER;
    request.name = tensor_name_.c_str();
    request.process_set_id = process_set_id_;
    site_.apply(&request);
    enqueueCollective(c, request, -1, nullptr, std::move(done));
  }

 private:
  std::string tensor_name_;
  int32_t process_set_id_ = 0;
  TracedCallSite site_;
};

class JoinKernel : public tf::AsyncOpKernel {
 public:
  explicit JoinKernel(tf::OpKernelConstruction* c) : AsyncOpKernel(c) { OP_REQUIRES_OK(c, site_.read(c)); }
  void ComputeAsync(tf::OpKernelContext* c, DoneCallback done) override {
    if (!requireInitialized(c, done)) return;
    hvdlite_request request = hvdlite_request_defaults();
    request.op = HVDLITE_OP_JOIN;
    request.name = "__join";
    site_.apply(&request);
    enqueueCollective(c, request, -1, writeLastRank, std::move(done));
  }

 private:
  static tf::Status writeLastRank(tf::OpKernelContext* c, const hvdlite_result& result) {
    tf::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, tf::TensorShape({}), &out));
    out->scalar<int32_t>()() = result.value;
    return tf::Status();
  }

  TracedCallSite site_;
};

// rank/size and friends: synchronous, answered from the running Runtime.
template <int32_t (*Query)(), const char* kWhat>
class TopologyKernel : public tf::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(tf::OpKernelContext* c) override {
    int32_t value = Query();
    OP_REQUIRES(c, value >= 0,
                tf::errors::FailedPrecondition("hvdlite has not been initialized; call "
                                               "hvdlite.tensorflow.init() before asking its ",
                                               kWhat));
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(0, tf::TensorShape({}), &out));
    out->scalar<int32_t>()() = value;
  }
};

constexpr char kRank[] = "rank", kSize[] = "size", kLocalRank[] = "local rank",
               kLocalSize[] = "local size";

}  // namespace

// CPU kernels: host memory everywhere (the CPU transports read and write host
// buffers).
REGISTER_KERNEL_BUILDER(Name("HvdliteAllreduce").Device(tf::DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteAllgather").Device(tf::DEVICE_CPU), AllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteBroadcast").Device(tf::DEVICE_CPU), BroadcastKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteAlltoall").Device(tf::DEVICE_CPU), AlltoallKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteReducescatter").Device(tf::DEVICE_CPU), ReducescatterKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteBarrier").Device(tf::DEVICE_CPU), BarrierKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteJoin").Device(tf::DEVICE_CPU), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteRank").Device(tf::DEVICE_CPU),
                        (TopologyKernel<hvdlite_rank, kRank>));
REGISTER_KERNEL_BUILDER(Name("HvdliteSize").Device(tf::DEVICE_CPU),
                        (TopologyKernel<hvdlite_size, kSize>));
REGISTER_KERNEL_BUILDER(Name("HvdliteLocalRank").Device(tf::DEVICE_CPU),
                        (TopologyKernel<hvdlite_local_rank, kLocalRank>));
REGISTER_KERNEL_BUILDER(Name("HvdliteLocalSize").Device(tf::DEVICE_CPU),
                        (TopologyKernel<hvdlite_local_size, kLocalSize>));

// GPU kernels (Note [TF GPU kernels] in device_placement.h): the tensors stay
// on the GPU; what the kernel reads or writes on the host is HostMemory.
REGISTER_KERNEL_BUILDER(Name("HvdliteAllreduce").Device(tf::DEVICE_GPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteAllgather").Device(tf::DEVICE_GPU), AllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteBroadcast").Device(tf::DEVICE_GPU), BroadcastKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteAlltoall")
                            .Device(tf::DEVICE_GPU)
                            .HostMemory("splits")
                            .HostMemory("received_splits"),
                        AlltoallKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteReducescatter").Device(tf::DEVICE_GPU), ReducescatterKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteBarrier").Device(tf::DEVICE_GPU), BarrierKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteJoin").Device(tf::DEVICE_GPU).HostMemory("last_rank"), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteRank").Device(tf::DEVICE_GPU).HostMemory("rank"),
                        (TopologyKernel<hvdlite_rank, kRank>));
REGISTER_KERNEL_BUILDER(Name("HvdliteSize").Device(tf::DEVICE_GPU).HostMemory("size"),
                        (TopologyKernel<hvdlite_size, kSize>));
REGISTER_KERNEL_BUILDER(Name("HvdliteLocalRank").Device(tf::DEVICE_GPU).HostMemory("local_rank"),
                        (TopologyKernel<hvdlite_local_rank, kLocalRank>));
REGISTER_KERNEL_BUILDER(Name("HvdliteLocalSize").Device(tf::DEVICE_GPU).HostMemory("local_size"),
                        (TopologyKernel<hvdlite_local_size, kLocalSize>));

}  // namespace hvdlite::tensorflow_ops
