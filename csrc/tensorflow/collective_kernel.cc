#include "collective_kernel.h"

namespace hvdlite::tensorflow_ops {
namespace tf = ::tensorflow;

std::vector<int64_t> dimsOf(const tf::Tensor& tensor) {
  std::vector<int64_t> dims;
  for (int i = 0; i < tensor.dims(); ++i) dims.push_back(tensor.dim_size(i));
  return dims;
}

tf::Status Reduction::read(tf::OpKernelConstruction* c) {
  TF_RETURN_IF_ERROR(c->GetAttr("reduce_op", &reduce_op_));
  TF_RETURN_IF_ERROR(c->GetAttr("prescale_factor", &prescale_));
  return c->GetAttr("postscale_factor", &postscale_);
}

void Reduction::apply(hvdlite_request* request) const {
  request->reduce_op = reduce_op_;
  request->prescale = prescale_;
  request->postscale = postscale_;
}

CollectiveKernel::CollectiveKernel(tf::OpKernelConstruction* c, int32_t op, const char* what, Outputs outputs,
                                   bool reduces)
    : AsyncOpKernel(c), op_(op), what_(what), outputs_(outputs), reduces_(reduces) {
  OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
  OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  OP_REQUIRES_OK(c, site_.read(c));
  if (reduces_) OP_REQUIRES_OK(c, reduction_.read(c));
}

std::string CollectiveKernel::named(int member) const {
  std::string name = "'" + tensor_name_ + "'";
  return member < 0 ? name : name + " member " + std::to_string(member);
}

bool CollectiveKernel::validInput(tf::OpKernelContext* c, const tf::Tensor& tensor, const DoneCallback& done,
                                  Placement* placement, int member) {
  if (!requireInitialized(c, done)) return false;
  tf::Status status = placementOf(c, type_string() + " of " + named(member), placement);
  if (status.ok() && hvdliteDtype(tensor.dtype()) < 0) {
    status = tf::errors::InvalidArgument("hvdlite cannot reduce or move tensors of type ",
                                         tf::DataTypeString(tensor.dtype()), " (", named(member), ")");
  }
  if (status.ok()) return true;
  c->SetStatus(status);
  done();
  return false;
}

bool CollectiveKernel::validRows(tf::OpKernelContext* c, const tf::Tensor& tensor, const char* what,
                                 const DoneCallback& done, Placement* placement, int member) {
  if (!validInput(c, tensor, done, placement, member)) return false;
  if (tensor.dims() >= 1) return true;
  c->SetStatus(tf::errors::InvalidArgument(what, " of ", named(member), " needs a tensor of rank >= 1, got a scalar"));
  done();
  return false;
}

hvdlite_request CollectiveKernel::shapedRequest(const tf::Tensor& input, int32_t op, const std::string& name,
                                                const std::vector<int64_t>& dims,
                                                const Placement& placement) const {
  auto request = requestFor(input, op, name, process_set_id_);
  placement.apply(&request);
  request.shape = dims.data();
  request.ndim = static_cast<int32_t>(dims.size());
  site_.apply(&request);
  return request;
}

bool CollectiveKernel::validMember(tf::OpKernelContext* c, const tf::Tensor& tensor, const DoneCallback& done,
                                   Placement* placement, int member) {
  return sizedByCore() ? validRows(c, tensor, what_, done, placement, member)
                       : validInput(c, tensor, done, placement, member);
}

hvdlite_request CollectiveKernel::memberRequest(const tf::Tensor& input, const std::string& name,
                                                const std::vector<int64_t>& dims, const Placement& placement,
                                                tf::Tensor* output) const {
  auto request = shapedRequest(input, op_, name, dims, placement);
  if (reduces_) reduction_.apply(&request);
  if (output != nullptr) request.output = const_cast<char*>(output->tensor_data().data());
  return request;
}

void SingleKernel::ComputeAsync(tf::OpKernelContext* c, DoneCallback done) {
  const tf::Tensor& input = c->input(0);
  Placement placement;
  if (!validMember(c, input, done, &placement)) return;
  tf::Tensor* output = nullptr;
  if (!sizedByCore()) OP_REQUIRES_OK_ASYNC(c, c->allocate_output(0, input.shape(), &output), done);
  auto dims = dimsOf(input);
  auto request = memberRequest(input, tensor_name_, dims, placement, output);
  addFields(c, &request);
  enqueueCollective(c, request, sizedByCore() ? 0 : -1, resultHandler(), std::move(done));
}

}  // namespace hvdlite::tensorflow_ops
