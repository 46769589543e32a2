#include "core/executor.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "common/errors.h"
#include "common/reduce.h"

namespace hvdlite::core {
namespace {

int64_t rowElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::vector<int64_t> withFirstDim(std::vector<int64_t> shape, int64_t first) {
  if (shape.empty()) shape.push_back(first);
  else shape[0] = first;
  return shape;
}

// kAverage is a sum followed by a division by the number of contributing ranks.
ReduceOp wireOp(const Response& r) { return r.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : r.reduce_op; }
// After the reduction: divide by the contributing ranks for kAverage, then
// apply the postscale factor. Floats fold both into one multiply; integers
// divide exactly first (a multiply by 1/n can land just below a whole number).
void finishReduction(void* data, size_t count, const Response& r) {
  const int ranks = std::max(1, r.active_ranks);
  if (r.reduce_op != ReduceOp::kAverage) return scaleInPlace(data, count, r.dtype, r.postscale);
  if (isFloatingPoint(r.dtype)) return scaleInPlace(data, count, r.dtype, r.postscale / ranks);
  divideInPlace(data, count, r.dtype, ranks);
  scaleInPlace(data, count, r.dtype, r.postscale);
}

// Rows of the first dimension that reducescatter gives each rank: as even as
// possible, the first (rows % size) ranks get one more.
std::vector<int64_t> scatterRows(int64_t rows, int size) {
  std::vector<int64_t> out(size, rows / size);
  for (int r = 0; r < rows % size; ++r) out[r] += 1;
  return out;
}

}  // namespace

void complete(TensorEntry& entry, const Status& status) {
  if (!entry.callback) return;
  try {
    entry.callback(entry, status);
  } catch (...) {
    // A callback that throws is a binding bug; the core must keep serving.
  }
}

void Executor::execute(const std::vector<Response>& responses, transport::Communicator& comm,
                       TensorQueue& queue) {
  for (const auto& batch : planFusion(responses, fusion_threshold_)) runBatch(batch, comm, queue);
}

void Executor::runBatch(const Batch& batch, transport::Communicator& comm, TensorQueue& queue) {
  in_flight_.clear();
  for (const Response* r : batch.members) in_flight_.push_back(queue.take(r->name));
  const Response& head = *batch.members.front();
  TensorEntry* entry = in_flight_.front().get();
  if (head.error) {
    completeAll(Status::Error(StatusKind::kCollective, head.error_message));
    return;
  }
  switch (head.op) {
    case OpType::kAllreduce: allreduce(batch, comm); break;
    case OpType::kAllgather: allgather(head, entry, comm); break;
    case OpType::kBroadcast: broadcast(head, entry, comm); break;
    case OpType::kAlltoall: alltoall(head, entry, comm); break;
    case OpType::kReducescatter: reducescatter(head, entry, comm); break;
    default: control(head, entry); break;
  }
  completeAll(Status::Ok());
}

void Executor::completeAll(const Status& status) {
  for (auto& entry : in_flight_) {
    if (!entry) continue;
    timeline_.opEnd(entry->name, entry->dtype, shapeString(entry->shape));
    complete(*entry, status);
  }
  in_flight_.clear();
}

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
void Executor::allreduce(const Batch& batch, transport::Communicator& comm) {
  const Response& head = *batch.members.front();
  const ReduceOp op = wireOp(head);
  const size_t esize = dtypeSize(head.dtype);
  const size_t total = static_cast<size_t>(batch.bytes);
  TensorEntry* only = in_flight_.front().get();
  // One tensor of our own is reduced in its output, without a fusion copy.
  const bool fused = batch.members.size() > 1 || !only;
  size_t chunk = total;
  if (pipeline_bytes_ > 0 && total > pipeline_bytes_) {
    chunk = std::max(esize, pipeline_bytes_ / esize * esize);
  }
  const bool pipelined = chunk < total;
  uint8_t* staging = fused ? fusion_buffer_.reserve(chunk) : nullptr;
  // A pipelined batch is one activity in the timeline, not three per chunk.
  auto stage = [&](const char* what, auto&& work) {
    if (!pipelined) timeline_.activityStart(head.name, what);
    work();
    if (!pipelined) timeline_.activityEnd(head.name);
  };
  if (pipelined) timeline_.activityStart(head.name, "PIPELINED_ALLREDUCE");
  for (size_t begin = 0; begin < total; begin += chunk) {
    const size_t end = std::min(total, begin + chunk);
    const size_t count = (end - begin) / esize;
    uint8_t* data = staging;
    if (fused) {
      stage("FUSION_PACK", [&] { packRange(batch, in_flight_, begin, end, op, staging); });
    } else {
      data = static_cast<uint8_t*>(only->output) + begin;
      const auto* input = static_cast<const uint8_t*>(only->input) + begin;
      if (input != data) std::memcpy(data, input, end - begin);
      scaleInPlace(data, count, head.dtype, head.prescale);
    }
    stage("ALLREDUCE", [&] { comm.allreduce(data, count, head.dtype, op); });
    finishReduction(data, count, head);
    if (fused) stage("FUSION_UNPACK", [&] { unpackRange(batch, in_flight_, begin, end, staging); });
  }
  if (pipelined) timeline_.activityEnd(head.name);
}

void Executor::allgather(const Response& r, TensorEntry* e, transport::Communicator& comm) {
  const size_t row_bytes = rowElements(r.shape) * dtypeSize(r.dtype);
  std::vector<size_t> bytes(r.per_rank.size());
  int64_t rows = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<size_t>(r.per_rank[i]) * row_bytes;
    rows += r.per_rank[i];
  }
  auto out_shape = withFirstDim(r.shape, rows);
  size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t{0});
  void* out = e ? e->allocate(out_shape) : scratch_.reserve(total);
  timeline_.activityStart(r.name, "ALLGATHER");
  comm.allgatherv(e ? e->input : nullptr, out, bytes);
  timeline_.activityEnd(r.name);
  if (e) e->output_shape = out_shape;
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
  const int n = comm.size();
  const int me = comm.rank();
  const size_t row_bytes = rowElements(r.shape) * dtypeSize(r.dtype);
  std::vector<size_t> send(n), recv(n);
  std::vector<int64_t> received(n);
  int64_t rows = 0;
  for (int peer = 0; peer < n; ++peer) {
    send[peer] = static_cast<size_t>(r.per_rank[me * n + peer]) * row_bytes;
    received[peer] = r.per_rank[peer * n + me];
    recv[peer] = static_cast<size_t>(received[peer]) * row_bytes;
    rows += received[peer];
  }
  auto out_shape = withFirstDim(r.shape, rows);
  void* out = e->allocate(out_shape);
  timeline_.activityStart(r.name, "ALLTOALL");
  comm.alltoallv(e->input, send, out, recv);
  timeline_.activityEnd(r.name);
  e->output_shape = out_shape;
  e->received_splits = received;
}

void Executor::reducescatter(const Response& r, TensorEntry* e, transport::Communicator& comm) {
  const ReduceOp op = wireOp(r);
  const size_t esize = dtypeSize(r.dtype);
  const int64_t row = rowElements(r.shape);
  auto rows = scatterRows(r.shape.empty() ? 1 : r.shape[0], comm.size());
  std::vector<size_t> counts;
  for (auto n : rows) counts.push_back(static_cast<size_t>(n * row));
  size_t total = static_cast<size_t>(r.elementCount());
  uint8_t* in = fusion_buffer_.reserve(total * esize);
  if (e) {
    std::memcpy(in, e->input, total * esize);
    scaleInPlace(in, total, r.dtype, r.prescale);
  } else {
    fillNeutral(in, total, r.dtype, op);
  }
  auto out_shape = withFirstDim(r.shape, rows[comm.rank()]);
  size_t mine = counts[comm.rank()];
  void* out = e ? e->allocate(out_shape) : scratch_.reserve(mine * esize);
  timeline_.activityStart(r.name, "REDUCESCATTER");
  comm.reducescatter(in, out, counts, r.dtype, op);
  timeline_.activityEnd(r.name);
  finishReduction(out, mine, r);
  if (e) e->output_shape = out_shape;
}

// Barrier needs no data: its response exists only once every rank reached it.
void Executor::control(const Response& r, TensorEntry* e) {
  switch (r.op) {
    case OpType::kJoin:
      if (e) e->result_value = r.value;
      break;
    case OpType::kAddProcessSet: {
      std::vector<int> ranks(r.per_rank.begin(), r.per_rank.end());
      int32_t id = registry_.addProcessSet(ranks);
      if (e) e->result_value = id;
      break;
    }
    case OpType::kRemoveProcessSet:
      registry_.removeProcessSet(r.value);
      if (e) e->result_value = r.value;
      break;
    default:
      break;
  }
}

}  // namespace hvdlite::core
