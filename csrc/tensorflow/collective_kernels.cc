// The AsyncOpKernels of the ops in op_definitions.cc. Each one turns its
// inputs into an hvdlite request and returns at once; the core's background
// thread finishes the kernel (pending_op.cc), so TF's executor threads never
// block on other ranks. Each class serves both devices: on a GPU the request
// also carries the GPU and TF's stream (Note [TF GPU kernels] in
// device_placement.h).
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "api/api.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "device_placement.h"
#include "pending_op.h"

namespace hvdlite::tensorflow_ops {
namespace tf = ::tensorflow;
using DoneCallback = tf::AsyncOpKernel::DoneCallback;

namespace {

std::vector<int64_t> dimsOf(const tf::Tensor& tensor) {
  std::vector<int64_t> dims;
  for (int i = 0; i < tensor.dims(); ++i) dims.push_back(tensor.dim_size(i));
  return dims;
}

// Attributes every collective has: the tensor's name and its process set.
class CollectiveKernel : public tf::AsyncOpKernel {
 public:
  explicit CollectiveKernel(tf::OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
    OP_REQUIRES_OK(c, site_.read(c));
  }

 protected:
  // Checks what every collective needs, and finds where its tensors are; on
  // failure finishes the kernel and returns false.
  bool validInput(tf::OpKernelContext* c, const tf::Tensor& tensor, const DoneCallback& done,
                  Placement* placement) {
    if (!requireInitialized(c, done)) return false;
    tf::Status status = placementOf(c, type_string() + " of '" + tensor_name_ + "'", placement);
    if (status.ok() && hvdliteDtype(tensor.dtype()) < 0) {
      status = tf::errors::InvalidArgument("hvdlite cannot reduce or move tensors of type ",
                                           tf::DataTypeString(tensor.dtype()), " ('", tensor_name_, "')");
    }
    if (status.ok()) return true;
    c->SetStatus(status);
    done();
    return false;
  }

  // validInput() for collectives along the first dimension (no scalars).
  bool validRows(tf::OpKernelContext* c, const tf::Tensor& tensor, const char* what,
                 const DoneCallback& done, Placement* placement) {
    if (!validInput(c, tensor, done, placement)) return false;
    if (tensor.dims() >= 1) return true;
    c->SetStatus(tf::errors::InvalidArgument(what, " of '", tensor_name_,
                                             "' needs a tensor of rank >= 1, got a scalar"));
    done();
    return false;
  }

  // A request for `input` on `placement`; `dims` must outlive the enqueue call.
  hvdlite_request shapedRequest(const tf::Tensor& input, int32_t op, const std::string& name,
                                const std::vector<int64_t>& dims, const Placement& placement) const {
    auto request = requestFor(input, op, name, process_set_id_);
    placement.apply(&request);
    request.shape = dims.data();
    request.ndim = static_cast<int32_t>(dims.size());
    site_.apply(&request);
    return request;
  }

  std::string tensor_name_;
  int32_t process_set_id_ = 0;
  TracedCallSite site_;
};

// Allreduce and reducescatter also carry a reduce op and scale factors.
class ReducingKernel : public CollectiveKernel {
 public:
  explicit ReducingKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  }

 protected:
  hvdlite_request reducingRequest(const tf::Tensor& input, int32_t op, const std::string& name,
                                  const std::vector<int64_t>& dims, const Placement& placement) const {
    auto request = shapedRequest(input, op, name, dims, placement);
    request.reduce_op = reduce_op_;
    request.prescale = prescale_;
    request.postscale = postscale_;
    return request;
  }

  int32_t reduce_op_ = HVDLITE_REDUCE_SUM;
  float prescale_ = 1.0f, postscale_ = 1.0f;
};

class AllreduceKernel : public ReducingKernel {
 public:
  using ReducingKernel::ReducingKernel;
  void ComputeAsync(tf::OpKernelContext* c, DoneCallback done) override {
    const tf::Tensor& input = c->input(0);
    Placement placement;
    if (!validInput(c, input, done, &placement)) return;
    tf::Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(c, c->allocate_output(0, input.shape(), &output), done);
    auto dims = dimsOf(input);
    auto request = reducingRequest(input, HVDLITE_OP_ALLREDUCE, tensor_name_, dims, placement);
    request.output = const_cast<char*>(output->tensor_data().data());
    enqueueCollective(c, request, -1, nullptr, std::move(done));
  }
};

// Members are negotiated and fused together; the kernel finishes when the last one does.
class GroupedAllreduceKernel : public ReducingKernel {
 public:
  using ReducingKernel::ReducingKernel;
  void ComputeAsync(tf::OpKernelContext* c, DoneCallback done) override {
    const int n = c->num_inputs();
    Placement placement;
    for (int i = 0; i < n; ++i) {
      if (!validInput(c, c->input(i), done, &placement)) return;
    }
    std::vector<tf::Tensor*> outputs(n);
    for (int i = 0; i < n; ++i) {
      OP_REQUIRES_OK_ASYNC(c, c->allocate_output(i, c->input(i).shape(), &outputs[i]), done);
    }
    if (n == 0) {
      done();
      return;
    }
    // done() runs once, after the last member completes.
    auto remaining = std::make_shared<std::atomic<int>>(n);
    auto shared_done = std::make_shared<DoneCallback>(std::move(done));
    for (int i = 0; i < n; ++i) {
      auto dims = dimsOf(c->input(i));
      std::string member = tensor_name_ + "." + std::to_string(i);
      auto request = reducingRequest(c->input(i), HVDLITE_OP_ALLREDUCE, member, dims, placement);
      request.output = const_cast<char*>(outputs[i]->tensor_data().data());
      request.group = tensor_name_.c_str();
      request.group_size = n;
      // SetStatus keeps the first error; done() only after the last member.
      enqueueCollective(c, request, -1, nullptr, [remaining, shared_done] {
        if (remaining->fetch_sub(1) == 1) (*shared_done)();
      });
    }
  }
};

class AllgatherKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;
  void ComputeAsync(tf::OpKernelContext* c, DoneCallback done) override {
    const tf::Tensor& input = c->input(0);
    Placement placement;
    if (!validRows(c, input, "allgather", done, &placement)) return;
    auto dims = dimsOf(input);
    auto request = shapedRequest(input, HVDLITE_OP_ALLGATHER, tensor_name_, dims, placement);
    enqueueCollective(c, request, 0, nullptr, std::move(done));
  }
};

class BroadcastKernel : public CollectiveKernel {
 public:
  explicit BroadcastKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
  }
  void ComputeAsync(tf::OpKernelContext* c, DoneCallback done) override {
    const tf::Tensor& input = c->input(0);
    Placement placement;
    if (!validInput(c, input, done, &placement)) return;
    tf::Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(c, c->allocate_output(0, input.shape(), &output), done);
    auto dims = dimsOf(input);
    auto request = shapedRequest(input, HVDLITE_OP_BROADCAST, tensor_name_, dims, placement);
    request.output = const_cast<char*>(output->tensor_data().data());
    request.root_rank = root_rank_;
    enqueueCollective(c, request, -1, nullptr, std::move(done));
  }

 private:
  int32_t root_rank_ = 0;
};

class AlltoallKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;
  void ComputeAsync(tf::OpKernelContext* c, DoneCallback done) override {
    const tf::Tensor& input = c->input(0);
    const tf::Tensor& splits = c->input(1);  // HostMemory on a GPU
    Placement placement;
    if (!validRows(c, input, "alltoall", done, &placement)) return;
    auto dims = dimsOf(input);
    auto request = shapedRequest(input, HVDLITE_OP_ALLTOALL, tensor_name_, dims, placement);
    auto split_values = splits.flat<int64_t>();
    request.splits = split_values.data();
    request.num_splits = static_cast<int32_t>(split_values.size());
    enqueueCollective(c, request, 0, writeReceivedSplits, std::move(done));
  }

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

class ReducescatterKernel : public ReducingKernel {
 public:
  using ReducingKernel::ReducingKernel;
  void ComputeAsync(tf::OpKernelContext* c, DoneCallback done) override {
    const tf::Tensor& input = c->input(0);
    Placement placement;
    if (!validRows(c, input, "reducescatter", done, &placement)) return;
    auto dims = dimsOf(input);
    auto request = reducingRequest(input, HVDLITE_OP_REDUCESCATTER, tensor_name_, dims, placement);
    enqueueCollective(c, request, 0, nullptr, std::move(done));
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
REGISTER_KERNEL_BUILDER(Name("HvdliteGroupedAllreduce").Device(tf::DEVICE_CPU), GroupedAllreduceKernel);
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
REGISTER_KERNEL_BUILDER(Name("HvdliteGroupedAllreduce").Device(tf::DEVICE_GPU), GroupedAllreduceKernel);
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
