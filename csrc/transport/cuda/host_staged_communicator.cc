#include "transport/cuda/host_staged_communicator.h"

#include <numeric>

#include "common/reduce.h"

namespace hvdlite::transport::cuda {
namespace {

size_t total(const std::vector<size_t>& parts) { return std::accumulate(parts.begin(), parts.end(), size_t{0}); }

}  // namespace

std::string HostStagedCommunicator::describe() const {
  return "host-staged (pinned host memory, then " + cpu().describe() + ")";
}

// Staging slot 0 holds a collective's input, slot 1 its output where the
// two differ in size; copyFromHost() reads either without another copy.

void HostStagedCommunicator::doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  const size_t bytes = count * dtypeSize(dtype);
  void* host = stageToHost(data, bytes);
  cpu().allreduce(host, count, dtype, op);
  copyFromHost(data, host, bytes);
}

void HostStagedCommunicator::doAllreduceScaled(void* data, size_t count, DataType dtype, double factor) {
  // NCCL's premultiplied sum: each rank's values times `factor`, summed.
  const size_t bytes = count * dtypeSize(dtype);
  void* host = stageToHost(data, bytes);
  scaleInPlace(host, count, dtype, factor);
  cpu().allreduce(host, count, dtype, ReduceOp::kSum);
  copyFromHost(data, host, bytes);
}

void HostStagedCommunicator::doAllgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  void* mine = stageToHost(in, bytes_per_rank[rank()]);
  void* all = pinned(1, total(bytes_per_rank));
  cpu().allgatherv(mine, all, bytes_per_rank);
  copyFromHost(out, all, total(bytes_per_rank));
}

void HostStagedCommunicator::doBroadcast(void* data, size_t bytes, int root) {
  void* host = rank() == root ? stageToHost(data, bytes) : pinned(0, bytes);
  cpu().broadcast(host, bytes, root);
  if (rank() != root) copyFromHost(data, host, bytes);
}

void HostStagedCommunicator::doAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                         const std::vector<size_t>& recv_bytes) {
  void* sent = stageToHost(in, total(send_bytes));
  void* received = pinned(1, total(recv_bytes));
  cpu().alltoallv(sent, send_bytes, received, recv_bytes);
  copyFromHost(out, received, total(recv_bytes));
}

void HostStagedCommunicator::doReducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                             DataType dtype, ReduceOp op) {
  const size_t esize = dtypeSize(dtype);
  void* host_in = stageToHost(in, total(counts) * esize);
  void* host_out = pinned(1, counts[rank()] * esize);
  cpu().reducescatter(host_in, host_out, counts, dtype, op);
  copyFromHost(out, host_out, counts[rank()] * esize);
}

void HostStagedCommunicator::doReducescatterScaled(const void* in, void* out, const std::vector<size_t>& counts,
                                                   DataType dtype, double factor) {
  const size_t esize = dtypeSize(dtype);
  void* host_in = stageToHost(in, total(counts) * esize);
  scaleInPlace(host_in, total(counts), dtype, factor);
  void* host_out = pinned(1, counts[rank()] * esize);
  cpu().reducescatter(host_in, host_out, counts, dtype, ReduceOp::kSum);
  copyFromHost(out, host_out, counts[rank()] * esize);
}

}  // namespace hvdlite::transport::cuda
