// AsyncOpKernels of the grouped collectives whose outputs are sized by the
// core: grouped allgather and grouped reducescatter. Like grouped allreduce
// (collective_kernels.cc), every member is one request carrying the group's
// name and size, so the coordinator releases the members together and the
// fusion buffer packs them into as few collectives as fit; the kernel finishes
// when its last member does. Each class serves both devices (Note [TF GPU
// kernels] in device_placement.h).
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

class GroupedRowsKernel : public tf::AsyncOpKernel {
 public:
  GroupedRowsKernel(tf::OpKernelConstruction* c, int32_t op, const char* what)
      : AsyncOpKernel(c), op_(op), what_(what) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
    OP_REQUIRES_OK(c, site_.read(c));
  }

  void ComputeAsync(tf::OpKernelContext* c, DoneCallback done) override {
    if (!requireInitialized(c, done)) return;
    Placement placement;
    OP_REQUIRES_OK_ASYNC(c, placementOf(c, type_string() + " of '" + tensor_name_ + "'", &placement), done);
    const int n = c->num_inputs();
    // Every member is checked before any is queued: a group that is only
    // partly queued would never complete on the coordinator.
    for (int i = 0; i < n; ++i) {
      const tf::Tensor& input = c->input(i);
      OP_REQUIRES_ASYNC(c, hvdliteDtype(input.dtype()) >= 0,
                        tf::errors::InvalidArgument(
                            "hvdlite cannot move tensors of type ", tf::DataTypeString(input.dtype()),
                            " ('", tensor_name_, "' member ", i, ")"),
                        done);
      OP_REQUIRES_ASYNC(c, input.dims() >= 1,
                        tf::errors::InvalidArgument(what_, " of '", tensor_name_, "' member ", i,
                                                    " needs a tensor of rank >= 1, got a scalar"),
                        done);
    }
    if (n == 0) {
      done();
      return;
    }
    auto remaining = std::make_shared<std::atomic<int>>(n);
    auto shared_done = std::make_shared<DoneCallback>(std::move(done));
    for (int i = 0; i < n; ++i) {
      const tf::Tensor& input = c->input(i);
      std::vector<int64_t> dims;
      for (int d = 0; d < input.dims(); ++d) dims.push_back(input.dim_size(d));
      std::string member = tensor_name_ + "." + std::to_string(i);
      auto request = requestFor(input, op_, member, process_set_id_);
      placement.apply(&request);
      request.shape = dims.data();
      request.ndim = static_cast<int32_t>(dims.size());
      request.group = tensor_name_.c_str();
      request.group_size = n;
      site_.apply(&request);
      completeRequest(&request);
      // Output i is allocated by the core once its size is negotiated;
      // SetStatus keeps the first error; done() only after the last member.
      enqueueCollective(c, request, i, nullptr, [remaining, shared_done] {
        if (remaining->fetch_sub(1) == 1) (*shared_done)();
      });
    }
  }

 protected:
  virtual void completeRequest(hvdlite_request*) const {}

  std::string tensor_name_;
  int32_t process_set_id_ = 0;
  TracedCallSite site_;

 private:
  int32_t op_;
  const char* what_;
};

class GroupedAllgatherKernel : public GroupedRowsKernel {
 public:
  explicit GroupedAllgatherKernel(tf::OpKernelConstruction* c)
      : GroupedRowsKernel(c, HVDLITE_OP_ALLGATHER, "grouped_allgather") {}
};

class GroupedReducescatterKernel : public GroupedRowsKernel {
 public:
  explicit GroupedReducescatterKernel(tf::OpKernelConstruction* c)
      : GroupedRowsKernel(c, HVDLITE_OP_REDUCESCATTER, "grouped_reducescatter") {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  }

 protected:
  void completeRequest(hvdlite_request* request) const override {
    request->reduce_op = reduce_op_;
    request->prescale = prescale_;
    request->postscale = postscale_;
  }

 private:
  int32_t reduce_op_ = HVDLITE_REDUCE_SUM;
  float prescale_ = 1.0f, postscale_ = 1.0f;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("HvdliteGroupedAllgather").Device(tf::DEVICE_CPU),
                        GroupedAllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteGroupedReducescatter").Device(tf::DEVICE_CPU),
                        GroupedReducescatterKernel);
// The members stay on the GPU: nothing here is read on the host.
REGISTER_KERNEL_BUILDER(Name("HvdliteGroupedAllgather").Device(tf::DEVICE_GPU),
                        GroupedAllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteGroupedReducescatter").Device(tf::DEVICE_GPU),
                        GroupedReducescatterKernel);

}  // namespace hvdlite::tensorflow_ops
