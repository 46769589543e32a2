// The base of every collective's AsyncOpKernel (collective_kernels.cc,
// grouped_kernels.cc): the attributes every collective has, the checks of its
// inputs, and the request built from them.
#pragma once

#include <string>
#include <vector>

#include "api/api.h"
#include "device_placement.h"
#include "pending_op.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace hvdlite::tensorflow_ops {

std::vector<int64_t> dimsOf(const ::tensorflow::Tensor& tensor);

// The reduce op and scale factors of an allreduce or reducescatter, read from
// the op's attributes.
class Reduction {
 public:
  ::tensorflow::Status read(::tensorflow::OpKernelConstruction* c);
  void apply(hvdlite_request* request) const;

 private:
  int32_t reduce_op_ = HVDLITE_REDUCE_SUM;
  float prescale_ = 1.0f, postscale_ = 1.0f;
};

// How a collective's outputs are sized.
enum class Outputs {
  kLikeInputs,   // allreduce, broadcast: each output has its input's shape, allocated by the kernel
  kSizedByCore,  // allgather, alltoall, reducescatter: allocated once negotiation sized them
};

// What every collective's kernel has: its op, the tensor's name, its process
// set and call site, the reduction where it reduces, and how its outputs are
// sized (collectives whose core sizes the output work along rows).
class CollectiveKernel : public ::tensorflow::AsyncOpKernel {
 public:
  // `what`: the op's name in messages ("allgather").
  CollectiveKernel(::tensorflow::OpKernelConstruction* c, int32_t op, const char* what, Outputs outputs,
                   bool reduces);

 protected:
  using DoneCallback = ::tensorflow::AsyncOpKernel::DoneCallback;

  // validRows() where the core sizes the outputs, else validInput().
  bool validMember(::tensorflow::OpKernelContext* c, const ::tensorflow::Tensor& tensor,
                   const DoneCallback& done, Placement* placement, int member = -1);
  // The request for `input` under `name`: shape, placement, call site,
  // reduction, and `output` (NULL where the core sizes it).
  hvdlite_request memberRequest(const ::tensorflow::Tensor& input, const std::string& name,
                                const std::vector<int64_t>& dims, const Placement& placement,
                                ::tensorflow::Tensor* output) const;
  bool sizedByCore() const { return outputs_ == Outputs::kSizedByCore; }

  // Checks what every collective needs, and finds where its tensors are; on
  // failure finishes the kernel and returns false. `member` >= 0: the
  // tensor is that member of a group, and messages say so.
  bool validInput(::tensorflow::OpKernelContext* c, const ::tensorflow::Tensor& tensor,
                  const DoneCallback& done, Placement* placement, int member = -1);
  // validInput() for collectives along the first dimension (no scalars).
  bool validRows(::tensorflow::OpKernelContext* c, const ::tensorflow::Tensor& tensor, const char* what,
                 const DoneCallback& done, Placement* placement, int member = -1);
  // A request for `input` on `placement`; `dims` must outlive the enqueue call.
  hvdlite_request shapedRequest(const ::tensorflow::Tensor& input, int32_t op, const std::string& name,
                                const std::vector<int64_t>& dims, const Placement& placement) const;

  std::string tensor_name_;
  int32_t process_set_id_ = 0;
  TracedCallSite site_;

 private:
  // "'name'", or "'name' member i".
  std::string named(int member) const;

  int32_t op_;
  const char* what_;
  Outputs outputs_;
  bool reduces_;
  Reduction reduction_;
};

// The kernel of a collective of one tensor: input 0 to output 0; a
// subclass adds the op's own fields and what it makes of the result.
class SingleKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;
  void ComputeAsync(::tensorflow::OpKernelContext* c, DoneCallback done) override;

 protected:
  virtual void addFields(::tensorflow::OpKernelContext*, hvdlite_request*) const {}
  virtual ResultHandler resultHandler() const { return nullptr; }
};

// A kernel class of `Base` (SingleKernel, GroupedKernel) whose op, name,
// outputs and reduction are fixed: the ops that need nothing of their own.
template <class Base, int32_t kOp, const char* kWhat, Outputs kOutputs, bool kReduces>
class KernelOf : public Base {
 public:
  explicit KernelOf(::tensorflow::OpKernelConstruction* c) : Base(c, kOp, kWhat, kOutputs, kReduces) {}
};

}  // namespace hvdlite::tensorflow_ops
