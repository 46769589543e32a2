#include "core/carried.h"

#include <cstring>

#include "common/reduce.h"
#include "core/collective_math.h"
#include "core/executor.h"

namespace hvdlite::core {

// Note [Tensors carried by the negotiation]
// A cached allreduce costs two exchanges among the ranks per cycle: the
// cache bits (Note [Cache bits] in response_cache.h), then the data. For a
// tensor of a few bytes the data is no bigger than the bits, and each
// exchange is a full synchronization of the ranks: a futex hand-off within a
// host, a network round trip across hosts. So each rank appends to its bits
// the bytes of the small cached allreduces it has ready (at most kCarryBytes
// in all), and the bits travel by allgather instead of a bitwise-AND
// allreduce: every rank ANDs the ranks' bits itself, and where every tensor
// the cycle decides was carried by every rank, reduces them itself, in rank
// order, and completes them without a second exchange. Nothing is named on
// the wire: each rank knows which slots another rank carried, and where,
// from that rank's ready bits and the cache, which is the same on every
// member (carriedLayout). A rank carries what it has ready before it knows
// whether the others have it too; bytes of a tensor that is not ready
// everywhere are dropped and sent again in a later cycle.
// Only a cycle that is nothing but carried tensors completes that way: one
// with requests for the coordinator, a shutdown, a join or new parameters,
// or a cached tensor too big to carry, runs every response through the
// executor as before (the carried bytes of it are simply unused), so that
// responses keep their order and a joined rank's neutral values, fusion and
// the device paths stay where they are. A lost peer fails the allgather as
// it failed the allreduce, naming the rank. Only in sets of up to
// kCarryMaxRanks ranks: beyond 2, an allgather over TCP takes more steps
// than the allreduce it replaces (carried.h).

bool carriable(const Response& r) {
  return r.op == OpType::kAllreduce && !r.error && r.device < 0 && r.reduce_op != ReduceOp::kAdasum;
}

std::vector<CarriedSlot> carriedLayout(const std::vector<size_t>& ready_slots, const ResponseCache& cache,
                                       size_t budget) {
  std::vector<CarriedSlot> out;
  size_t used = 0;
  for (size_t slot : ready_slots) {
    const Response& r = cache.response(slot);
    if (!carriable(r)) continue;
    const size_t bytes = static_cast<size_t>(r.elementCount()) * dtypeSize(r.dtype);
    if (bytes > budget - used) continue;
    out.push_back(CarriedSlot{slot, used, bytes});
    used += bytes;
  }
  return out;
}

std::vector<uint8_t> reduceCarried(const Response& r, const std::vector<const uint8_t*>& parts) {
  const size_t count = static_cast<size_t>(r.elementCount());
  const size_t bytes = count * dtypeSize(r.dtype);
  const ReduceOp op = wireOp(r);
  std::vector<uint8_t> result(parts.front(), parts.front() + bytes);
  scaleInPlace(result.data(), count, r.dtype, r.prescale);
  std::vector<uint8_t> scaled(bytes);
  for (size_t k = 1; k < parts.size(); ++k) {
    std::memcpy(scaled.data(), parts[k], bytes);
    scaleInPlace(scaled.data(), count, r.dtype, r.prescale);
    reduceInto(result.data(), scaled.data(), count, r.dtype, op);
  }
  finishReduction(result.data(), count, r);
  return result;
}

void completeCarried(const std::vector<Response>& responses, const std::vector<std::vector<uint8_t>>& results,
                     TensorQueue& queue, Timeline& timeline, const transport::Communicator& comm) {
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    TensorEntryPtr entry = queue.take(r.name);
    if (!entry) continue;  // not reached: a cycle with a joined rank is not carried
    const std::string problem = checkAgainstEntry(r, entry->shape, entry->dtype, comm.size(), comm.rank());
    if (!problem.empty()) {
      // Taken from the queue: the runtime's fatal path would not see it.
      const std::string sent = "(the coordinator) sent a response for " + problem;
      complete(*entry, Status::Error(StatusKind::kCollective, "allreduce of '" + r.name + "' failed: rank " +
                                                                std::to_string(comm.globalRank(0)) + " " + sent));
      throwBadPeerMessage(comm.globalRank(0), sent);
    }
    timeline.activityStart(r.name, "ALLREDUCE");
    std::memcpy(entry->output, results[i].data(), results[i].size());
    timeline.activityEnd(r.name);
    timeline.opEnd(entry->name, entry->dtype, shapeString(entry->shape));
    complete(*entry, Status::Ok());
  }
}

}  // namespace hvdlite::core
