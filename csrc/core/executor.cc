#include "core/executor.h"

#include <algorithm>
#include <cstring>

#include "common/errors.h"
#include "common/reduce.h"
#include "core/collective_calls.h"
#include "core/collective_math.h"
#include "core/entry_pool.h"

namespace hvdlite::core {

void complete(TensorEntry& entry, const Status& status) {
  if (!entry.callback) return;
  try {
    entry.callback(entry, status);
  } catch (...) {
    // A callback that throws is a binding bug; the core must keep serving.
  }
}

void Executor::execute(const std::vector<Response>& responses, transport::Communicator& comm,
                       const DeviceComms& device, TensorQueue& queue) {
  // A lone response (every small synchronous collective) is its own batch:
  // no fusion plan, and a batch whose storage is reused, not allocated.
  if (responses.size() == 1) {
    lone_.members.assign(1, &responses.front());
    lone_.bytes = batchBytes(responses.front());
    // With its member's end, as planFusion records it: the fusion ranges
    // (packRange, unpackRange, outputHolding) then read the member's bytes
    // from it instead of measuring its response each time.
    lone_.ends.assign(1, static_cast<size_t>(lone_.bytes));
    runBatch(lone_, comm, device, queue);
    return;
  }
  for (const auto& batch : planFusion(responses, fusion_threshold_)) runBatch(batch, comm, device, queue);
}

void Executor::runBatch(const Batch& batch, transport::Communicator& comm, const DeviceComms& device,
                        TensorQueue& queue) {
  in_flight_.clear();
  queue.takeEach(batch.members.size(), [&](size_t i) -> const std::string& { return batch.members[i]->name; },
                 in_flight_);
  const Response& head = *batch.members.front();
  TensorEntry* entry = in_flight_.front().get();
  if (head.error) {
    completeAll(Status::Error(head.error_kind, head.error_message, head.error_details));
    return;
  }
  checkEntries(batch, comm);
  if (head.device >= 0 && isTensorCollective(head.op)) {
    try {
      device_.run(batch, in_flight_, device);
    } catch (const DeviceAllocationError& e) {
      // Every rank fails this batch alike; the job goes on (Note [Allocation failures]).
      for (auto& member : in_flight_) {
        if (!member) continue;
        timeline_.opEnd(member->name, member->dtype, member->shape);
        complete(*member, Status::Error(StatusKind::kCollective, std::string(opTypeName(member->op)) + " of '" +
                                                                     member->name + "' failed: " + e.what()));
      }
      in_flight_.clear();
      return;
    }
    completeAll(Status::Ok());
    return;
  }
  switch (head.op) {
    case OpType::kAllreduce:
      if (head.reduce_op == ReduceOp::kAdasum) adasum(batch, comm);
      else allreduce(batch, comm);
      break;
    case OpType::kAllgather: allgather(head, entry, comm); break;
    case OpType::kBroadcast: broadcast(head, entry, comm); break;
    case OpType::kAlltoall: alltoall(head, entry, comm); break;
    case OpType::kReducescatter:
      if (batch.members.size() > 1) fusedReducescatter(batch, comm);
      else reducescatter(head, entry, comm);
      break;
    default: control(head, entry); break;
  }
  completeAll(Status::Ok());
}

// Note [Checked peer messages] in message.cc: sizes come from the
// coordinator's response, buffers from this rank's entries; they must agree
// before anything is read or written.
void Executor::checkEntries(const Batch& batch, transport::Communicator& comm) const {
  for (size_t i = 0; i < batch.members.size(); ++i) {
    const TensorEntry* entry = in_flight_[i].get();
    if (!entry) continue;  // joined: neutral values in scratch memory of the response's size
    // What checkAgainstEntry finds fitting for every tensor but an
    // allgather's or alltoall's, decided here without its message's string.
    const Response& r = *batch.members[i];
    const bool own_rows = r.op == OpType::kAllgather || r.op == OpType::kAlltoall;
    if (!own_rows && r.dtype == entry->dtype && r.shape == entry->shape) continue;
    const std::string problem =
        checkAgainstEntry(*batch.members[i], entry->shape, entry->dtype, comm.size(), comm.rank());
    if (problem.empty()) continue;
    throwBadPeerMessage(comm.globalRank(0), "(the coordinator) sent a response for " + problem);
  }
}

void Executor::completeAll(const Status& status) {
  for (auto& entry : in_flight_) {
    if (!entry) continue;
    timeline_.opEnd(entry->name, entry->dtype, entry->shape);
    complete(*entry, status);
  }
  keepEntries(in_flight_);  // for the next submissions (Note [Entries kept for reuse])
}

// Note [Callbacks without allocation]
// libstdc++'s std::function stores a trivially copyable callable of up to two
// pointers in itself and allocates anything larger. Lambdas capturing the
// batch, the entries, the chunk's start, the op and the head by reference are
// five pointers, so pack, unpack and combine cost a new and a delete each per
// chunk: ~170 instructions each, ~500 of a 4-byte allreduce's ~5,000-
// instruction cycle (callgrind, bench/call_profile.py). They capture one
// reference to a Range instead, are built once per batch, and read the
// chunk's start from it.
namespace {
struct Range {
  const Batch& batch;
  const std::vector<TensorEntryPtr>& entries;
  size_t begin;
  ReduceOp op;
  const Response& head;
};
}  // namespace

// Note [Pipelined allreduce]
// A batch larger than the pipeline chunk moves through the transport chunk by
// chunk: pack chunk k (copy in, prescale), reduce it, scale it and unpack it
// before packing chunk k+1. Each chunk stays in cache from one stage to the
// next, where packing the whole batch first would stream it through memory
// several more times; and the ranks overlap stages: one copies chunk k+1 into
// the shared segment while the other still reduces chunk k (Note
// [Shared-memory steps]). All of it runs on this thread: a second thread would
// pay a scheduler tick per hand-off on a busy core. Every rank cuts the same
// chunks (same batch, same chunk size), as the transport requires.
// The chunk is the transport's step (shared memory: its 1 MiB slot), where
// chunking adds no synchronization (50 x 1 MiB fused over shared memory: best
// 296 vs 370 ms, median 367 vs 484 ms of 18, interleaved, loaded machine); TCP's ring already pipelines its pieces,
// and restarting it per chunk measured slower (64 MiB: 343 vs 201 ms best of
// 18, interleaved, loaded machine), so TCP gets whole batches.
void Executor::allreduce(const Batch& batch, transport::Communicator& comm) {
  const Response& head = *batch.members.front();
  const ReduceOp op = wireOp(head);
  const size_t esize = dtypeSize(head.dtype);
  const size_t total = static_cast<size_t>(batch.bytes);
  TensorEntry* only = in_flight_.front().get();
  // Reduced by the cycle's exchange on every rank alike (Note [One exchange
  // for a cached small allreduce] in cached_exchange.cc): only the finish
  // (average, postscale) and the copy out remain. Fused with another
  // response, it runs as any member does, on every rank alike too.
  if (batch.members.size() == 1 && !head.reduced_in_negotiation.empty()) {
    HVD_CHECK(only && head.reduced_in_negotiation.size() == total, "'", head.name,
              "' was reduced in negotiation without this rank's entry of ", total, " bytes");
    timeline_.activityStart(head.name, "ALLREDUCE");
    unpackRange(batch, in_flight_, 0, total, head.reduced_in_negotiation.data(), &head);
    timeline_.activityEnd(head.name);
    return;
  }
  // One tensor of our own is staged in its output, without a fusion buffer.
  const bool fused = batch.members.size() > 1 || !only;
  const size_t wanted = pipeline_bytes_ >= 0 ? static_cast<size_t>(pipeline_bytes_)
                                             : comm.pipelineChunkBytes();
  size_t chunk = total;
  if (wanted > 0 && total > wanted) chunk = std::max(esize, wanted / esize * esize);
  const bool pipelined = chunk < total;
  uint8_t* staging = fused ? fusion_buffer_.reserve(chunk) : nullptr;
  if (pipelined) timeline_.activityStart(head.name, "PIPELINED_ALLREDUCE");
  // Copy-in with prescale, and copy-out with postscale (or the average), part
  // by part, wherever the communicator wants them (Note [Gathered allreduce]
  // in shm_communicator.cc). Each function captures only `range`, so none
  // allocates (Note [Callbacks without allocation]).
  Range range{batch, in_flight_, 0, op, head};
  const transport::Communicator::PackFn pack = [&range](uint8_t* dst, size_t from, size_t to) {
    packRange(range.batch, range.entries, range.begin + from, range.begin + to, range.op, dst);
  };
  const transport::Communicator::UnpackFn unpack = [&range](const uint8_t* src, size_t from, size_t to) {
    unpackRange(range.batch, range.entries, range.begin + from, range.begin + to, src, &range.head);
  };
  const transport::Communicator::CombineFn combine = [&range](uint8_t* dst, const uint8_t* other, size_t from,
                                                              size_t to) {
    combineRange(range.batch, range.entries, range.begin + from, range.begin + to, range.op, other, dst);
  };
  for (size_t begin = 0; begin < total; begin += chunk) {
    const size_t end = std::min(total, begin + chunk);
    range.begin = begin;
    // A chunk inside one tensor of our own is staged in that tensor's output.
    uint8_t* stage_at = outputHolding(batch, in_flight_, begin, end);
    if (!stage_at) stage_at = staging;
    if (!pipelined) timeline_.activityStart(head.name, "ALLREDUCE");
    comm.allreduceGathered((end - begin) / esize, head.dtype, op, pack, unpack, stage_at, combine);
    if (!pipelined) timeline_.activityEnd(head.name);
  }
  if (pipelined) timeline_.activityEnd(head.name);
}

// Adasum combines whole tensors (core/adasum.h): it gets the batch at once,
// with each member's bounds, never in pipelined chunks. Prescale before and
// postscale after, as Horovod does; a joined rank contributes zeros, which
// leave the other ranks' vectors unchanged.
void Executor::adasum(const Batch& batch, transport::Communicator& comm) {
  const Response& head = *batch.members.front();
  const size_t total = static_cast<size_t>(batch.bytes);
  TensorEntry* only = in_flight_.front().get();
  const bool fused = batch.members.size() > 1 || !only;
  std::vector<size_t> bounds{0};
  for (const Response* r : batch.members) bounds.push_back(bounds.back() + static_cast<size_t>(r->elementCount()));
  uint8_t* buffer = fused ? fusion_buffer_.reserve(total) : static_cast<uint8_t*>(only->output);
  packRange(batch, in_flight_, 0, total, ReduceOp::kSum, buffer);
  timeline_.activityStart(head.name, "ADASUM_ALLREDUCE");
  adasum_.allreduce(buffer, head.dtype, bounds, comm);
  timeline_.activityEnd(head.name);
  unpackRange(batch, in_flight_, 0, total, buffer, &head);
}

void Executor::allgather(const Response& r, TensorEntry* e, transport::Communicator& comm) {
  auto layout = allgatherLayout(r);
  void* out = e ? e->allocate(layout.out_shape) : scratch_.reserve(layout.total);
  const void* in = e ? e->input : nullptr;
  const size_t mine = layout.bytes[comm.rank()];
  if (in && overlaps(in, mine, out, layout.total)) {
    // Rows gathered into the tensor that holds them (Note [Outputs into the
    // caller's buffer] in api/caller_output.cc): no transport need accept
    // an input inside its output, so this rank's part goes first to scratch.
    uint8_t* staged = scratch_.reserve(mine);
    std::memcpy(staged, in, mine);
    in = staged;
  }
  allgatherInto(r, layout, in, out, comm, timeline_, "ALLGATHER");
  if (e) e->output_shape = layout.out_shape;
}

void Executor::broadcast(const Response& r, TensorEntry* e, transport::Communicator& comm) {
  size_t bytes = static_cast<size_t>(r.elementCount()) * dtypeSize(r.dtype);
  void* data = e ? e->output : scratch_.reserve(bytes);
  if (e && comm.rank() == r.root_rank && e->input != e->output) std::memcpy(data, e->input, bytes);
  timeline_.activityStart(r.name, "BROADCAST");
  comm.broadcast(data, bytes, r.root_rank);
  timeline_.activityEnd(r.name);
}

void Executor::alltoall(const Response& r, TensorEntry* e, transport::Communicator& comm) {
  auto layout = alltoallLayout(r, comm.size(), comm.rank());
  alltoallInto(r, layout, *e, e->allocate(layout.out_shape), comm, timeline_, "ALLTOALL");
}

void Executor::reducescatter(const Response& r, TensorEntry* e, transport::Communicator& comm) {
  const ReduceOp op = wireOp(r);
  const size_t esize = dtypeSize(r.dtype);
  auto [counts, out_shape] = reducescatterLayout(r, comm.size(), comm.rank());
  size_t total = static_cast<size_t>(r.elementCount());
  uint8_t* in = fusion_buffer_.reserve(total * esize);
  if (e) {
    std::memcpy(in, e->input, total * esize);
    scaleInPlace(in, total, r.dtype, r.prescale);
  } else {
    fillNeutral(in, total, r.dtype, op);
  }
  size_t mine = counts[comm.rank()];
  void* out = e ? e->allocate(out_shape) : scratch_.reserve(mine * esize);
  timeline_.activityStart(r.name, "REDUCESCATTER");
  comm.reducescatter(in, out, counts, r.dtype, op);
  timeline_.activityEnd(r.name);
  finishReduction(out, mine, r);
  if (e) e->output_shape = out_shape;
}

// Note [Fused reducescatter] in fusion.cc: one reducescatter of the members
// packed rank-major; this rank's share holds its rows of each member in turn.
// Every member shares the scales and divisor, so the share is finished once.
void Executor::fusedReducescatter(const Batch& batch, transport::Communicator& comm) {
  const Response& head = *batch.members.front();
  const size_t esize = dtypeSize(head.dtype);
  const int rank = comm.rank();
  const ScatterLayout layout = scatterLayout(batch, comm.size(), rank);
  uint8_t* in = fusion_buffer_.reserve(layout.total);
  packScatter(batch, layout, in_flight_, wireOp(head), in);
  std::vector<void*> outputs;
  for (size_t i = 0; i < batch.members.size(); ++i) {
    TensorEntry* e = in_flight_[i].get();
    outputs.push_back(e ? e->allocate(layout.shapes[i]) : nullptr);
  }
  const size_t mine = layout.counts[rank];
  uint8_t* share = scratch_.reserve(mine * esize);  // the share, before it is split among the outputs
  timeline_.activityStart(head.name, "REDUCESCATTER");
  comm.reducescatter(in, share, layout.counts, head.dtype, wireOp(head));
  timeline_.activityEnd(head.name);
  finishReduction(share, mine, head);
  unpackScatter(layout, rank, share, outputs);
  for (size_t i = 0; i < batch.members.size(); ++i) {
    if (TensorEntry* e = in_flight_[i].get()) e->output_shape = layout.shapes[i];
  }
}

// Barrier needs no data: its response exists only once every rank reached it.
void Executor::control(const Response& r, TensorEntry* e) {
  switch (r.op) {
    case OpType::kJoin:
      if (e) e->result_value = r.value;
      break;
    case OpType::kAddProcessSet: {
      std::vector<int> ranks(r.process_set_ranks.begin(), r.process_set_ranks.end());
      int32_t id = registry_.addProcessSet(ranks);
      if (e) e->result_value = id;
      break;
    }
    case OpType::kRemoveProcessSet:
      registry_.removeProcessSet(r.process_set_id);
      if (e) e->result_value = r.process_set_id;
      break;
    default:
      break;
  }
}

}  // namespace hvdlite::core
