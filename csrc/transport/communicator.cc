// The checked entry points of every Communicator and DeviceCommunicator
// (Note [Checked entry points]).
#include "transport/communicator.h"

#include <numeric>

#include "common/errors.h"
#include "transport/device_communicator.h"

namespace hvdlite::transport {
namespace {

constexpr int kNumReduceOps = static_cast<int>(ReduceOp::kBitAnd) + 1;

size_t sum(const std::vector<size_t>& values) {
  return std::accumulate(values.begin(), values.end(), size_t{0});
}

}  // namespace

void Communicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  checkReduction("allreduce", dtype, op);
  checkBuffer("allreduce", "data", data, count * dtypeSize(dtype));
  doAllreduce(data, count, dtype, op);
}

void Communicator::allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  checkPerRank("allgatherv", "bytes_per_rank", bytes_per_rank);
  checkBuffer("allgatherv", "in", in, bytes_per_rank[rank()]);
  checkBuffer("allgatherv", "out", out, sum(bytes_per_rank));
  doAllgatherv(in, out, bytes_per_rank);
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  checkRoot("broadcast", root);
  checkBuffer("broadcast", "data", data, bytes);
  doBroadcast(data, bytes, root);
}

void Communicator::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                             const std::vector<size_t>& recv_bytes) {
  checkPerRank("alltoallv", "send_bytes", send_bytes);
  checkPerRank("alltoallv", "recv_bytes", recv_bytes);
  const size_t mine = send_bytes[rank()], expected = recv_bytes[rank()];
  if (mine != expected) {
    fail("alltoallv", detail::concat("send_bytes[", rank(), "] = ", mine, " but recv_bytes[",
                                     rank(), "] = ", expected,
                                     ": a rank receives from itself what it sends itself"));
  }
  checkBuffer("alltoallv", "in", in, sum(send_bytes));
  checkBuffer("alltoallv", "out", out, sum(recv_bytes));
  doAlltoallv(in, send_bytes, out, recv_bytes);
}

void Communicator::reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                 DataType dtype, ReduceOp op) {
  checkReduction("reducescatter", dtype, op);
  checkScatter("reducescatter", in, out, counts, dtype);
  doReducescatter(in, out, counts, dtype, op);
}

void Communicator::allreduceGathered(size_t count, DataType dtype, ReduceOp op, const PackFn& pack,
                                     const UnpackFn& unpack, uint8_t* staging, const CombineFn& combine) {
  checkReduction("allreduce", dtype, op);
  if (count > 0) {
    checkBuffer("allreduce", "staging", staging, count * dtypeSize(dtype));
    HVD_CHECK(pack && unpack, "a gathered allreduce of ", count, " elements needs pack and unpack");
  }
  doAllreduceGathered(count, dtype, op, pack, unpack, staging, combine);
}

void Communicator::doAllreduceGathered(size_t count, DataType dtype, ReduceOp op,
                                       const PackFn& pack, const UnpackFn& unpack,
                                       uint8_t* staging, const CombineFn&) {
  const size_t bytes = count * dtypeSize(dtype);
  pack(staging, 0, bytes);
  doAllreduce(staging, count, dtype, op);
  unpack(staging, 0, bytes);
}

std::vector<std::string> Communicator::gather(const std::string& mine, int root) {
  checkRoot("gather", root);
  return doGather(mine, root);
}

void Communicator::broadcastMessage(std::string& message, int root) {
  checkRoot("broadcastMessage", root);
  doBroadcastMessage(message, root);
}

void Communicator::checkPerRank(const char* call, const char* what,
                                const std::vector<size_t>& values) const {
  if (values.size() == static_cast<size_t>(size())) return;
  fail(call, detail::concat(what, " has ", values.size(), " entries, but a process set of ",
                            size(), " ranks needs one per rank"));
}

void Communicator::checkReduction(const char* call, DataType dtype, ReduceOp op) const {
  if (static_cast<int>(dtype) >= kNumDataTypes) {
    fail(call, detail::concat("dtype code ", static_cast<int>(dtype), " is not a known dtype"));
  }
  if (static_cast<int>(op) >= kNumReduceOps) {
    fail(call, detail::concat("reduce op code ", static_cast<int>(op), " is not a known reduce op"));
  }
  if (op == ReduceOp::kAverage) {
    fail(call, "reduce op average never reaches a transport: the executor sums, then divides by "
               "the response's average_ranks");
  }
  if (op == ReduceOp::kAdasum) fail(call, "reduce op adasum is not implemented by any transport");
}

void Communicator::checkScatter(const char* call, const void* in, const void* out,
                                const std::vector<size_t>& counts, DataType dtype) const {
  checkPerRank(call, "counts", counts);
  checkBuffer(call, "in", in, sum(counts) * dtypeSize(dtype));
  checkBuffer(call, "out", out, counts[rank()] * dtypeSize(dtype));
}

void Communicator::checkRoot(const char* call, int root) const {
  if (root >= 0 && root < size()) return;
  fail(call, detail::concat("root ", root, " is not a rank of this process set (ranks 0..",
                            size() - 1, ")"));
}

void Communicator::checkBuffer(const char* call, const char* what, const void* buffer,
                               size_t bytes) const {
  if (buffer || bytes == 0) return;
  fail(call, detail::concat(what, " is null but ", bytes, " bytes go through it"));
}

void Communicator::fail(const char* call, const std::string& why) const {
  throw InvalidArgument(detail::concat(call, " on rank ", rank(), " (global rank ",
                                       globalRank(rank()), ") of a process set of ", size(),
                                       ": ", why));
}

void DeviceCommunicator::allreduceScaled(void* data, size_t count, DataType dtype, double factor) {
  checkScaled("allreduce (scaled sum)", dtype);
  checkBuffer("allreduce (scaled sum)", "data", data, count * dtypeSize(dtype));
  doAllreduceScaled(data, count, dtype, factor);
}

void DeviceCommunicator::reducescatterScaled(const void* in, void* out,
                                             const std::vector<size_t>& counts, DataType dtype,
                                             double factor) {
  checkScaled("reducescatter (scaled sum)", dtype);
  checkScatter("reducescatter (scaled sum)", in, out, counts, dtype);
  doReducescatterScaled(in, out, counts, dtype, factor);
}

void DeviceCommunicator::allreduceFinishingOnHost(void* data, size_t count, DataType dtype, ReduceOp op,
                                                  const HostFinish& finish) {
  checkReduction("allreduce", dtype, op);
  checkBuffer("allreduce", "data", data, count * dtypeSize(dtype));
  doAllreduceFinishingOnHost(data, count, dtype, op, finish);
}

void DeviceCommunicator::doAllreduceFinishingOnHost(void* data, size_t count, DataType dtype, ReduceOp op,
                                                    const HostFinish& finish) {
  doAllreduce(data, count, dtype, op);
  const size_t bytes = count * dtypeSize(dtype);
  void* host = stageToHost(data, bytes);
  finish(host, count);
  copyFromHost(data, host, bytes);
}

void DeviceCommunicator::copyMany(const std::vector<DeviceCopy>& copies) {
  for (const auto& c : copies) copy(c.dst, c.src, c.bytes);
}

void DeviceCommunicator::checkScaled(const char* call, DataType dtype) const {
  checkReduction(call, dtype, ReduceOp::kSum);
  if (isFloatingPoint(dtype)) return;
  fail(call, detail::concat("a scaled sum needs a floating-point dtype, not ", dtypeName(dtype)));
}

}  // namespace hvdlite::transport
