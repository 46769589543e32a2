#include "core/device_executor.h"

#include <algorithm>

#include "common/errors.h"
#include "common/reduce.h"
#include "core/collective_math.h"

namespace hvdlite::core {
namespace {

// Note [Scaling on the device]
// hvdlite compiles no CUDA kernels, so scaling rides on NCCL: a floating-point
// sum or average with any prescale/postscale is one premultiplied sum
// (ncclRedOpCreatePreMulSum) by prescale * postscale (/ ranks). What NCCL
// cannot express (integer averages, scaled min/max/product) takes a host
// round trip through the same host arithmetic as CPU tensors: rare, correct.
bool foldsIntoSum(const Response& r) {
  return isFloatingPoint(r.dtype) && (r.reduce_op == ReduceOp::kSum || r.reduce_op == ReduceOp::kAverage);
}

double sumFactor(const Response& r) {
  double factor = r.prescale * r.postscale;
  if (r.reduce_op == ReduceOp::kAverage) factor /= std::max(1, r.average_ranks);
  return factor;
}

bool needsFinish(const Response& r) { return r.reduce_op == ReduceOp::kAverage || r.postscale != 1.0; }

// The device this rank's tensors are on; a rank that joined has none and
// follows the response (its communicator is usually bound already).
int deviceOf(const std::vector<TensorEntryPtr>& entries, const Response& head,
             const transport::DeviceCommunicator& dev) {
  for (const auto& e : entries) {
    if (e) return e->device;
  }
  return dev.device() >= 0 ? dev.device() : head.device;
}

}  // namespace

void DeviceExecutor::run(const Batch& batch, Entries& entries, const DeviceComms& comms) {
  const Response& head = *batch.members.front();
  HVD_CHECK(comms.set, "a CUDA response without a device communicator");
  transport::DeviceCommunicator& dev = *comms.set;
  bool hierarchical = head.op == OpType::kAllreduce && comms.local && comms.cross;
  transport::DeviceCommunicator& used = hierarchical ? *comms.local : dev;
  used.useDevice(deviceOf(entries, head, used));
  for (const auto& e : entries) {
    if (e) used.waitFor(e->ready_event, e->stream);
  }
  TensorEntry* entry = entries.front().get();
  switch (head.op) {
    case OpType::kAllreduce:
      if (hierarchical) hierarchicalAllreduce(batch, entries, comms);
      else allreduce(batch, entries, dev);
      break;
    case OpType::kAllgather: allgather(head, entry, dev); break;
    case OpType::kBroadcast: broadcast(head, entry, dev); break;
    case OpType::kAlltoall: alltoall(head, entry, dev); break;
    case OpType::kReducescatter: reducescatter(head, entry, dev); break;
    default:
      throw InvalidArgument(std::string(opTypeName(head.op)) + " has no CUDA implementation");
  }
  for (const auto& e : entries) {
    if (e) used.signalDone(e->stream);
  }
}

// Copies every member into `buffer` (in batch order); a member this rank
// lacks gets neutral values. Scales by prescale on the host when asked.
void DeviceExecutor::pack(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev,
                          uint8_t* buffer, bool host_prescale) {
  const Response& head = *batch.members.front();
  const size_t esize = dtypeSize(head.dtype);
  bool missing = false;
  size_t offset = 0;
  for (size_t i = 0; i < batch.members.size(); ++i) {
    size_t bytes = batch.members[i]->elementCount() * esize;
    if (const TensorEntry* e = entries[i].get()) dev.copy(buffer + offset, e->input, bytes);
    else missing = true;
    offset += bytes;
  }
  if (!missing && !host_prescale) return;
  host_.resize(offset);
  dev.copyToHost(host_.data(), buffer, offset);
  offset = 0;
  for (size_t i = 0; i < batch.members.size(); ++i) {
    size_t count = batch.members[i]->elementCount();
    if (entries[i]) {
      if (host_prescale) scaleInPlace(host_.data() + offset, count, head.dtype, head.prescale);
    } else {
      fillNeutral(host_.data() + offset, count, head.dtype, wireOp(head));
    }
    offset += count * esize;
  }
  dev.copyFromHost(buffer, host_.data(), offset);
}

void DeviceExecutor::unpack(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev,
                            const uint8_t* buffer) {
  const size_t esize = dtypeSize(batch.members.front()->dtype);
  size_t offset = 0;
  for (size_t i = 0; i < batch.members.size(); ++i) {
    size_t bytes = batch.members[i]->elementCount() * esize;
    if (TensorEntry* e = entries[i].get()) dev.copy(e->output, buffer + offset, bytes);
    offset += bytes;
  }
}

void DeviceExecutor::finishOnHost(transport::DeviceCommunicator& dev, void* data, size_t count,
                                  const Response& r) {
  size_t bytes = count * dtypeSize(r.dtype);
  host_.resize(bytes);
  dev.copyToHost(host_.data(), data, bytes);
  finishReduction(host_.data(), count, r);
  dev.copyFromHost(data, host_.data(), bytes);
}

void DeviceExecutor::allreduce(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev) {
  const Response& head = *batch.members.front();
  const size_t total = batch.bytes / dtypeSize(head.dtype);
  const bool fold = foldsIntoSum(head);
  TensorEntry* only = entries.front().get();
  const bool fused = batch.members.size() > 1 || !only;
  // One tensor of our own is reduced in its output: no fusion copy.
  auto* buffer = static_cast<uint8_t*>(fused ? dev.reserve(batch.bytes, 0) : only->output);
  timeline_.activityStart(head.name, "FUSION_PACK");
  pack(batch, entries, dev, buffer, !fold && head.prescale != 1.0);
  timeline_.activityEnd(head.name);
  timeline_.activityStart(head.name, "NCCL_ALLREDUCE");
  if (fold && sumFactor(head) != 1.0) dev.allreduceScaled(buffer, total, head.dtype, sumFactor(head));
  else dev.allreduce(buffer, total, head.dtype, wireOp(head));
  if (!fold && needsFinish(head)) finishOnHost(dev, buffer, total, head);
  timeline_.activityEnd(head.name);
  if (fused) unpack(batch, entries, dev, buffer);
}

// Note [Hierarchical allreduce]
// NCCL reduce-scatter among this host's ranks leaves each with 1/local_size
// of the host's sum; those parts are summed across hosts by the CPU transport
// (rank i of every host together), then an NCCL allgather inside the host
// gives everyone the whole result. Only 1/local_size of the data crosses the
// network from each rank. The buffer is padded to a multiple of local_size.
void DeviceExecutor::hierarchicalAllreduce(const Batch& batch, Entries& entries, const DeviceComms& comms) {
  const Response& head = *batch.members.front();
  transport::DeviceCommunicator& local = *comms.local;
  const size_t esize = dtypeSize(head.dtype);
  const size_t total = batch.bytes / esize;
  const size_t n = static_cast<size_t>(local.size());
  const size_t chunk = (total + n - 1) / n;
  const size_t chunk_bytes = chunk * esize;
  const bool fold = foldsIntoSum(head);
  auto* buffer = static_cast<uint8_t*>(local.reserve(std::max<size_t>(chunk_bytes * n, 1), 0));
  timeline_.activityStart(head.name, "FUSION_PACK");
  pack(batch, entries, local, buffer, !fold && head.prescale != 1.0);
  timeline_.activityEnd(head.name);
  uint8_t* mine = buffer + local.rank() * chunk_bytes;
  std::vector<size_t> counts(n, chunk);
  timeline_.activityStart(head.name, "NCCL_REDUCESCATTER");
  if (fold && sumFactor(head) != 1.0) local.reducescatterScaled(buffer, mine, counts, head.dtype, sumFactor(head));
  else local.reducescatter(buffer, mine, counts, head.dtype, wireOp(head));
  timeline_.activityEnd(head.name);
  timeline_.activityStart(head.name, "CROSS_ALLREDUCE");
  host_.resize(chunk_bytes);
  local.copyToHost(host_.data(), mine, chunk_bytes);
  comms.cross->allreduce(host_.data(), chunk, head.dtype, wireOp(head));
  if (!fold && needsFinish(head)) finishReduction(host_.data(), chunk, head);
  local.copyFromHost(mine, host_.data(), chunk_bytes);
  timeline_.activityEnd(head.name);
  timeline_.activityStart(head.name, "NCCL_ALLGATHER");
  local.allgatherv(mine, buffer, std::vector<size_t>(n, chunk_bytes));
  timeline_.activityEnd(head.name);
  unpack(batch, entries, local, buffer);
}

void DeviceExecutor::allgather(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev) {
  auto layout = allgatherLayout(r);
  void* out = e ? e->allocate(layout.out_shape) : dev.reserve(std::max<size_t>(layout.total, 1), 1);
  timeline_.activityStart(r.name, "NCCL_ALLGATHER");
  dev.allgatherv(e ? e->input : nullptr, out, layout.bytes);
  timeline_.activityEnd(r.name);
  if (e) e->output_shape = layout.out_shape;
}

void DeviceExecutor::broadcast(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev) {
  size_t bytes = static_cast<size_t>(r.elementCount()) * dtypeSize(r.dtype);
  void* data = e ? e->output : dev.reserve(bytes, 1);
  if (e && dev.rank() == r.root_rank) dev.copy(data, e->input, bytes);
  timeline_.activityStart(r.name, "NCCL_BROADCAST");
  dev.broadcast(data, bytes, r.root_rank);
  timeline_.activityEnd(r.name);
}

void DeviceExecutor::alltoall(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev) {
  auto layout = alltoallLayout(r, dev.size(), dev.rank());
  void* out = e->allocate(layout.out_shape);
  timeline_.activityStart(r.name, "NCCL_ALLTOALL");
  dev.alltoallv(e->input, layout.send, out, layout.recv);
  timeline_.activityEnd(r.name);
  e->output_shape = layout.out_shape;
  e->received_splits = layout.received;
}

void DeviceExecutor::reducescatter(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev) {
  const size_t esize = dtypeSize(r.dtype);
  auto [counts, out_shape] = reducescatterLayout(r, dev.size(), dev.rank());
  const size_t total = static_cast<size_t>(r.elementCount());
  const bool fold = foldsIntoSum(r);
  // A copy, so that neither prescaling nor a joined rank's neutral values
  // touch the framework's input.
  auto* in = static_cast<uint8_t*>(dev.reserve(std::max<size_t>(total * esize, 1), 0));
  if (e) dev.copy(in, e->input, total * esize);
  if (!e || (!fold && r.prescale != 1.0)) {
    host_.resize(total * esize);
    if (e) {
      dev.copyToHost(host_.data(), in, total * esize);
      scaleInPlace(host_.data(), total, r.dtype, r.prescale);
    } else {
      fillNeutral(host_.data(), total, r.dtype, wireOp(r));
    }
    dev.copyFromHost(in, host_.data(), total * esize);
  }
  size_t mine = counts[dev.rank()];
  void* out = e ? e->allocate(out_shape) : dev.reserve(std::max<size_t>(mine * esize, 1), 1);
  timeline_.activityStart(r.name, "NCCL_REDUCESCATTER");
  if (fold && sumFactor(r) != 1.0) dev.reducescatterScaled(in, out, counts, r.dtype, sumFactor(r));
  else dev.reducescatter(in, out, counts, r.dtype, wireOp(r));
  if (!fold && needsFinish(r)) finishOnHost(dev, out, mine, r);
  timeline_.activityEnd(r.name);
  if (e) e->output_shape = out_shape;
}

}  // namespace hvdlite::core
