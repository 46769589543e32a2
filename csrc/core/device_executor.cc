#include "core/device_executor.h"

#include <algorithm>

#include "common/errors.h"
#include "common/reduce.h"
#include "core/collective_calls.h"
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

// Where a fused reducescatter's share starts in its fusion buffer: NCCL
// wants aligned buffers for its fastest kernels.
constexpr size_t kShareAlignment = 256;

bool needsFinish(const Response& r) { return r.reduce_op == ReduceOp::kAverage || r.postscale != 1.0; }

// Note [A rank's own GPU]
// NCCL binds each rank to one GPU, and two ranks of one host on one GPU is an
// error (or a silent slowdown). A rank's GPU is the one its own tensors are
// on: those of the batch, else the one its communicator was bound to, else the
// device of its latest CUDA tensor (own_device, kept by the runtime), else
// HVDLITE_CUDA_DEVICE, else its local rank. Never another rank's: a rank that
// joined before its first CUDA collective would otherwise create its
// communicator on the GPU of the response's (lowest present) rank.
int deviceOf(const std::vector<TensorEntryPtr>& entries, const transport::DeviceCommunicator& dev,
             int own_device) {
  for (const auto& e : entries) {
    if (e) return e->device;
  }
  return dev.device() >= 0 ? dev.device() : own_device;
}

std::string describe(const Batch& batch) {
  const Response& head = *batch.members.front();
  std::string what = std::string(opTypeName(head.op)) + " of '" + head.name + "'";
  if (batch.members.size() > 1) what += " (and " + std::to_string(batch.members.size() - 1) + " more fused)";
  return what;
}

// Note [One wait per stream]
// A fused batch's members usually come from one framework stream. Its ready
// events mark positions in that stream, so the one enqueued last covers the
// others, and one done event serves every consumer: per batch one wait per
// distinct producer stream and one per distinct consumer stream, not four
// CUDA calls per member (200 gradients: 800 calls).
std::vector<const TensorEntry*> lastPerStream(const std::vector<TensorEntryPtr>& entries) {
  std::vector<const TensorEntry*> last;
  for (const auto& e : entries) {
    if (!e) continue;
    auto same = std::find_if(last.begin(), last.end(), [&](const TensorEntry* o) { return o->stream == e->stream; });
    if (same == last.end()) last.push_back(e.get());
    else if (e->sequence > (*same)->sequence) *same = e.get();
  }
  return last;
}

// Sets the calling thread's CUDA state (device, capture mode) back when a
// framework thread ran the batch; hvdlite's own threads keep what
// useDevice() set.
class CallerThread {
 public:
  CallerThread(transport::DeviceCommunicator& dev, bool restore) : dev_(dev), restore_(restore) {
    if (restore_) state_ = dev.saveThread();
  }
  ~CallerThread() {
    if (restore_) dev_.restoreThread(state_);
  }
  CallerThread(const CallerThread&) = delete;
  CallerThread& operator=(const CallerThread&) = delete;

 private:
  transport::DeviceCommunicator& dev_;
  bool restore_;
  transport::ThreadCudaState state_;
};

}  // namespace

void DeviceExecutor::run(const Batch& batch, Entries& entries, const DeviceComms& comms) {
  const Response& head = *batch.members.front();
  HVD_CHECK(comms.comm, "a CUDA response without a device communicator");
  transport::DeviceCommunicator& dev = *comms.comm;
  CallerThread caller(dev, comms.restore_caller_device);
  dev.useDevice(deviceOf(entries, dev, comms.own_device));
  for (const TensorEntry* e : lastPerStream(entries)) dev.waitFor(e->ready_event, e->stream);
  TensorEntry* entry = entries.front().get();
  switch (head.op) {
    case OpType::kAllreduce: allreduce(batch, entries, dev); break;
    case OpType::kAllgather: allgather(head, entry, dev); break;
    case OpType::kBroadcast: broadcast(head, entry, dev); break;
    case OpType::kAlltoall: alltoall(head, entry, dev); break;
    case OpType::kReducescatter:
      if (batch.members.size() > 1) fusedReducescatter(batch, entries, dev);
      else reducescatter(head, entry, dev);
      break;
    default:
      throw InvalidArgument(std::string(opTypeName(head.op)) + " has no CUDA implementation");
  }
  // Note [Completion on the consumer's stream]: one event for the batch,
  // waited on when each result is asked for; no framework stream waits now.
  transport::DeviceEvent done = dev.recordDone(describe(batch));
  for (auto& e : entries) {
    if (e) e->done_event = done;
  }
}

// Note [Allocation failures]
// A GPU can run out of memory. A rank that cannot allocate must not skip the
// collective alone: its peers would wait in NCCL for it forever. So where a
// batch allocates, every rank of the set says whether it could
// (firstFailedRank: one small CPU allreduce), and if one could not, every
// rank fails that batch's entries with an out-of-memory error naming it; the
// job goes on. Whether a batch allocates must be decided alike on every rank:
// outputs (allgather, alltoall, reducescatter) always allocate; a fusion
// buffer does when the batch needs more than every rank is known to have
// (agreed_), which all ranks track alike. Fusion buffers come from the
// framework's allocator (or cudaMallocAsync) for the NCCL stream; outputs
// from the entry's allocator. A reducescatter's output size is known at
// enqueue, where the runtime allocates it on the caller's thread: no
// agreement, and no allocation here.
void* DeviceExecutor::reserve(transport::DeviceCommunicator& dev, size_t bytes, int slot, bool& agree,
                              std::string& failure) {
  bytes = std::max<size_t>(bytes, 1);
  auto& agreed = agreed_[&dev];
  if (bytes > agreed[slot]) agree = true;
  return dev.reserve(bytes, slot, failure);
}

void* DeviceExecutor::allocateOutput(TensorEntry& e, const std::vector<int64_t>& shape, std::string& failure) {
  try {
    void* out = e.allocate(shape);
    if (!out && failure.empty()) failure = "its output allocator returned no memory";
    return out;
  } catch (const std::exception& error) {
    if (failure.empty()) failure = std::string("allocating its output failed: ") + error.what();
    return nullptr;
  }
}

void DeviceExecutor::agree(transport::DeviceCommunicator& dev, const std::string& failure) {
  const int first = dev.firstFailedRank(failure.empty());
  if (first == dev.size()) return;
  // Buffers may differ across ranks now: the next batch allocates and agrees again.
  for (auto& [comm, sizes] : agreed_) sizes = {0, 0};
  const int rank = dev.globalRank(first);
  std::string why = first == dev.rank() && !failure.empty() ? failure : "see that rank's error for the details";
  throw DeviceAllocationError("out of GPU memory on rank " + std::to_string(rank) + ": " + why +
                              ". Only this operation failed; free GPU memory (smaller batches, fewer tensors in "
                              "flight, torch.cuda.empty_cache()) and try again");
}

// Copies every member into `buffer` (in batch order); a member this rank
// lacks gets neutral values. Scales by prescale on the host when asked.
void DeviceExecutor::pack(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev,
                          uint8_t* buffer, bool host_prescale) {
  const Response& head = *batch.members.front();
  const size_t esize = dtypeSize(head.dtype);
  bool missing = false;
  size_t offset = 0;
  std::vector<transport::DeviceCopy> copies;
  copies.reserve(batch.members.size());
  for (size_t i = 0; i < batch.members.size(); ++i) {
    size_t bytes = batch.members[i]->elementCount() * esize;
    if (const TensorEntry* e = entries[i].get()) copies.push_back({buffer + offset, e->input, bytes});
    else missing = true;
    offset += bytes;
  }
  dev.copyMany(copies);
  if (!missing && !host_prescale) return;
  auto* host = static_cast<uint8_t*>(dev.stageToHost(buffer, offset));
  offset = 0;
  for (size_t i = 0; i < batch.members.size(); ++i) {
    size_t count = batch.members[i]->elementCount();
    if (entries[i]) {
      if (host_prescale) scaleInPlace(host + offset, count, head.dtype, head.prescale);
    } else {
      fillNeutral(host + offset, count, head.dtype, wireOp(head));
    }
    offset += count * esize;
  }
  dev.copyFromHost(buffer, host, offset);
}

void DeviceExecutor::unpack(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev,
                            const uint8_t* buffer) {
  const size_t esize = dtypeSize(batch.members.front()->dtype);
  size_t offset = 0;
  std::vector<transport::DeviceCopy> copies;
  copies.reserve(batch.members.size());
  for (size_t i = 0; i < batch.members.size(); ++i) {
    size_t bytes = batch.members[i]->elementCount() * esize;
    if (TensorEntry* e = entries[i].get()) copies.push_back({e->output, buffer + offset, bytes});
    offset += bytes;
  }
  dev.copyMany(copies);
}

void DeviceExecutor::finishOnHost(transport::DeviceCommunicator& dev, void* data, size_t count,
                                  const Response& r) {
  size_t bytes = count * dtypeSize(r.dtype);
  void* host = dev.stageToHost(data, bytes);
  finishReduction(host, count, r);
  dev.copyFromHost(data, host, bytes);
}

void DeviceExecutor::allreduce(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev) {
  const Response& head = *batch.members.front();
  const size_t esize = dtypeSize(head.dtype);
  const size_t total = batch.bytes / esize;
  // The communicator may want room past the batch (two levels: equal parts).
  const size_t room = dev.allreduceRoom(total) * esize;
  const bool fold = foldsIntoSum(head);
  TensorEntry* only = entries.front().get();
  // Every rank reserves a fusion buffer, and so can agree on it (Note
  // [Allocation failures]), unless the batch is one tensor that fits in its
  // output: then only a rank that joined reserves one.
  const bool everyone_reserves = batch.members.size() > 1 || room > static_cast<size_t>(batch.bytes);
  const bool fused = everyone_reserves || !only;
  // One tensor of our own is reduced in its output: no fusion copy.
  uint8_t* buffer = static_cast<uint8_t*>(only ? only->output : nullptr);
  if (fused) {
    bool must_agree = false;
    std::string failure;
    buffer = static_cast<uint8_t*>(reserve(dev, room, 0, must_agree, failure));
    if (everyone_reserves) {
      if (must_agree) agree(dev, failure);
      agreed_[&dev][0] = std::max(agreed_[&dev][0], std::max<size_t>(room, 1));
    } else if (!buffer) {
      // A rank that joined: only it allocates, so it cannot agree (fatal instead).
      throw TransportError("rank " + std::to_string(dev.globalRank(dev.rank())) + ", which joined, " + failure);
    }
  }
  timeline_.activityStart(head.name, "FUSION_PACK");
  pack(batch, entries, dev, buffer, !fold && head.prescale != 1.0);
  timeline_.activityEnd(head.name);
  timeline_.activityStart(head.name, "NCCL_ALLREDUCE");
  if (fold && sumFactor(head) != 1.0) {
    dev.allreduceScaled(buffer, total, head.dtype, sumFactor(head));
  } else if (!fold && needsFinish(head)) {
    dev.allreduceFinishingOnHost(buffer, total, head.dtype, wireOp(head),
                                 [&](void* host, size_t count) { finishReduction(host, count, head); });
  } else {
    dev.allreduce(buffer, total, head.dtype, wireOp(head));
  }
  timeline_.activityEnd(head.name);
  if (fused) unpack(batch, entries, dev, buffer);
}

void DeviceExecutor::allgather(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev) {
  auto layout = allgatherLayout(r);
  bool must_agree = true;
  std::string failure;
  void* out = e ? allocateOutput(*e, layout.out_shape, failure) : reserve(dev, layout.total, 1, must_agree, failure);
  const void* in = e ? e->input : nullptr;
  if (in && out && failure.empty() && overlaps(in, layout.bytes[dev.rank()], out, layout.total)) {
    // The host executor stages such an input (Note [Outputs into the caller's
    // buffer]); here that would need device scratch that every rank agrees on.
    failure = "its input lies inside the output buffer given; on a GPU, gather into a separate buffer";
  }
  agree(dev, failure);
  allgatherInto(r, layout, in, out, dev, timeline_, "NCCL_ALLGATHER");
  if (e) e->output_shape = layout.out_shape;
}

void DeviceExecutor::broadcast(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev) {
  size_t bytes = static_cast<size_t>(r.elementCount()) * dtypeSize(r.dtype);
  // Only a rank that joined allocates here; the others cannot tell, so its
  // failure is fatal (Note [Failing, not hanging]) rather than agreed.
  std::string failure;
  void* data = e ? e->output : dev.reserve(std::max<size_t>(bytes, 1), 1, failure);
  if (!data) throw TransportError("rank " + std::to_string(dev.globalRank(dev.rank())) + ", which joined: " + failure);
  if (e && dev.rank() == r.root_rank) dev.copy(data, e->input, bytes);
  timeline_.activityStart(r.name, "NCCL_BROADCAST");
  dev.broadcast(data, bytes, r.root_rank);
  timeline_.activityEnd(r.name);
}

void DeviceExecutor::alltoall(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev) {
  auto layout = alltoallLayout(r, dev.size(), dev.rank());
  std::string failure;
  void* out = allocateOutput(*e, layout.out_shape, failure);
  agree(dev, failure);
  alltoallInto(r, layout, *e, out, dev, timeline_, "NCCL_ALLTOALL");
}

void DeviceExecutor::reducescatter(const Response& r, TensorEntry* e, transport::DeviceCommunicator& dev) {
  // A rank that joined cannot take part: the coordinator fails the tensor.
  HVD_CHECK(e && e->output, "a CUDA reducescatter without its entry or its output (allocated at enqueue)");
  const size_t esize = dtypeSize(r.dtype);
  auto [counts, out_shape] = reducescatterLayout(r, dev.size(), dev.rank());
  const size_t total = static_cast<size_t>(r.elementCount());
  const bool fold = foldsIntoSum(r);
  const size_t mine = counts[dev.rank()];
  // NCCL reads the framework's input as it is; only a prescale NCCL cannot
  // fold in needs a scaled copy, so that the input stays untouched.
  const void* in = e->input;
  if (!fold && r.prescale != 1.0) {
    bool must_agree = false;
    std::string failure;
    auto* scaled = static_cast<uint8_t*>(reserve(dev, total * esize, 0, must_agree, failure));
    if (must_agree) agree(dev, failure);
    agreed_[&dev][0] = std::max(agreed_[&dev][0], std::max<size_t>(total * esize, 1));
    dev.copy(scaled, e->input, total * esize);
    void* host = dev.stageToHost(scaled, total * esize);
    scaleInPlace(host, total, r.dtype, r.prescale);
    dev.copyFromHost(scaled, host, total * esize);
    in = scaled;
  }
  timeline_.activityStart(r.name, "NCCL_REDUCESCATTER");
  if (fold && sumFactor(r) != 1.0) dev.reducescatterScaled(in, e->output, counts, r.dtype, sumFactor(r));
  else dev.reducescatter(in, e->output, counts, r.dtype, wireOp(r));
  if (!fold && needsFinish(r)) finishOnHost(dev, e->output, mine, r);
  timeline_.activityEnd(r.name);
  e->output_shape = out_shape;
}

// Note [Fused reducescatter] in fusion.cc, on the device. One fusion buffer
// holds the members packed rank-major and, after them, this rank's share,
// which NCCL writes (uneven counts: one reduce to each rank, as
// reduceScatterWith in transport/nccl/nccl_communicator.cc does them) and
// which is then copied into each member's output, allocated at enqueue. Every rank reserves room for the largest share
// (rank 0's), so all sizes, and so whether to agree, are alike on every rank
// (Note [Allocation failures]).
void DeviceExecutor::fusedReducescatter(const Batch& batch, Entries& entries, transport::DeviceCommunicator& dev) {
  const Response& head = *batch.members.front();
  for (const auto& e : entries) {
    // A rank that joined cannot take part: the coordinator fails the tensor.
    HVD_CHECK(e && e->output, "a CUDA reducescatter without its entry or its output (allocated at enqueue)");
  }
  const size_t esize = dtypeSize(head.dtype);
  const int rank = dev.rank();
  const ScatterLayout layout = scatterLayout(batch, dev.size(), rank);
  const size_t share_at = (layout.total + kShareAlignment - 1) / kShareAlignment * kShareAlignment;
  const size_t bytes = share_at + *std::max_element(layout.counts.begin(), layout.counts.end()) * esize;
  bool must_agree = false;
  std::string failure;
  auto* buffer = static_cast<uint8_t*>(reserve(dev, bytes, 0, must_agree, failure));
  if (must_agree) agree(dev, failure);
  agreed_[&dev][0] = std::max(agreed_[&dev][0], std::max<size_t>(bytes, 1));
  const bool fold = foldsIntoSum(head);
  timeline_.activityStart(head.name, "FUSION_PACK");
  std::vector<transport::DeviceCopy> copies;
  for (size_t k = 0; k < layout.parts.size(); ++k) {
    const auto& part = layout.parts[k];
    const auto* input = static_cast<const uint8_t*>(entries[k % layout.members]->input);
    if (part.bytes > 0) copies.push_back({buffer + part.at, input + part.from, part.bytes});
  }
  dev.copyMany(copies);
  if (!fold && head.prescale != 1.0 && layout.total > 0) {
    void* host = dev.stageToHost(buffer, layout.total);
    scaleInPlace(host, layout.total / esize, head.dtype, head.prescale);
    dev.copyFromHost(buffer, host, layout.total);
  }
  timeline_.activityEnd(head.name);
  uint8_t* share = buffer + share_at;
  const size_t mine = layout.counts[rank];
  timeline_.activityStart(head.name, "NCCL_REDUCESCATTER");
  if (fold && sumFactor(head) != 1.0) dev.reducescatterScaled(buffer, share, layout.counts, head.dtype, sumFactor(head));
  else dev.reducescatter(buffer, share, layout.counts, head.dtype, wireOp(head));
  if (!fold && needsFinish(head) && mine > 0) finishOnHost(dev, share, mine, head);
  timeline_.activityEnd(head.name);
  copies.clear();
  for (size_t i = 0; i < layout.members; ++i) {
    const auto& part = layout.part(rank, i);
    if (part.bytes > 0) copies.push_back({entries[i]->output, share + (part.at - layout.share_at[rank]), part.bytes});
    entries[i]->output_shape = layout.shapes[i];
  }
  dev.copyMany(copies);
}

}  // namespace hvdlite::core
