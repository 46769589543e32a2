// AsyncOpKernels of the grouped collectives: grouped allreduce, allgather
// and reducescatter, one base for the three (GroupedKernel).
//
// Note [Grouped kernels]
// Every member is one request carrying the group's name and size, so the
// coordinator releases the members together and the fusion buffer packs
// them into as few collectives as fit. Every member is checked before any
// is queued: a group only partly queued would never complete on the
// coordinator. The kernel finishes when its last member does; SetStatus
// keeps the first member's error. Each class serves both devices (Note [TF
// GPU kernels] in device_placement.h).
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "api/api.h"
#include "collective_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace hvdlite::tensorflow_ops {
namespace tf = ::tensorflow;

namespace {

class GroupedKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;

  void ComputeAsync(tf::OpKernelContext* c, DoneCallback done) override {
    const int n = c->num_inputs();
    Placement placement;
    for (int i = 0; i < n; ++i) {
      if (!validMember(c, c->input(i), done, &placement, i)) return;
    }
    std::vector<tf::Tensor*> outputs(n, nullptr);
    if (!sizedByCore()) {
      for (int i = 0; i < n; ++i) {
        OP_REQUIRES_OK_ASYNC(c, c->allocate_output(i, c->input(i).shape(), &outputs[i]), done);
      }
    }
    if (n == 0) {
      done();
      return;
    }
    auto remaining = std::make_shared<std::atomic<int>>(n);
    auto shared_done = std::make_shared<DoneCallback>(std::move(done));
    for (int i = 0; i < n; ++i) {
      auto dims = dimsOf(c->input(i));
      std::string member = tensor_name_ + "." + std::to_string(i);
      auto request = memberRequest(c->input(i), member, dims, placement, outputs[i]);
      request.group = tensor_name_.c_str();
      request.group_size = n;
      enqueueCollective(c, request, sizedByCore() ? i : -1, nullptr, [remaining, shared_done] {
        if (remaining->fetch_sub(1) == 1) (*shared_done)();
      });
    }
  }
};

constexpr char kGroupedAllreduce[] = "grouped_allreduce";
constexpr char kGroupedAllgather[] = "grouped_allgather";
constexpr char kGroupedReducescatter[] = "grouped_reducescatter";
using GroupedAllreduceKernel =
    KernelOf<GroupedKernel, HVDLITE_OP_ALLREDUCE, kGroupedAllreduce, Outputs::kLikeInputs, true>;
using GroupedAllgatherKernel =
    KernelOf<GroupedKernel, HVDLITE_OP_ALLGATHER, kGroupedAllgather, Outputs::kSizedByCore, false>;
using GroupedReducescatterKernel =
    KernelOf<GroupedKernel, HVDLITE_OP_REDUCESCATTER, kGroupedReducescatter, Outputs::kSizedByCore, true>;

}  // namespace

REGISTER_KERNEL_BUILDER(Name("HvdliteGroupedAllreduce").Device(tf::DEVICE_CPU), GroupedAllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteGroupedAllgather").Device(tf::DEVICE_CPU), GroupedAllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteGroupedReducescatter").Device(tf::DEVICE_CPU),
                        GroupedReducescatterKernel);
// The members stay on the GPU: nothing here is read on the host.
REGISTER_KERNEL_BUILDER(Name("HvdliteGroupedAllreduce").Device(tf::DEVICE_GPU), GroupedAllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteGroupedAllgather").Device(tf::DEVICE_GPU), GroupedAllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("HvdliteGroupedReducescatter").Device(tf::DEVICE_GPU),
                        GroupedReducescatterKernel);

}  // namespace hvdlite::tensorflow_ops
