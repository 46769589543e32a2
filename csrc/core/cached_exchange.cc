#include "core/cached_exchange.h"

#include <cstring>

#include "common/reduce.h"
#include "core/collective_math.h"

namespace hvdlite::core {

// Note [One exchange for a cached small allreduce]
// A cached allreduce used to cost two exchanges: the cycle's bitwise AND of
// cache bits (Note [Cache bits] in response_cache.h), then the executor's
// allreduce of the data. For a synchronous allreduce of a few bytes (a loss,
// a metric, a counter) the second exchange is half the call: over shared
// memory each is one publish and one wait on every other rank, plus the
// hand-off between cores that the wait costs (bench/call_profile.py, 4
// bytes at 2 ranks: 1.28 us against Open MPI's 0.72). So a rank whose only
// ready cached tensor is a small allreduce, with no request to send in full,
// writes its data, packed and prescaled as packRange would, with the cache
// slot into its own lane at the end of the bit vector. Every other lane it
// leaves all ones, so the AND hands every rank every lane unchanged: the
// bits' exchange is an allgather of the lanes too, with no new collective in
// any transport, shared memory, TCP, MPI or two levels alike. The exchange
// is therefore still an allreduce, and its shape (how many words) must be
// known before anyone knows who carries data: it is fixed by the set's size
// and the slots in use, as the bits' words are, and the lanes cost
// 24 bytes a rank on every cycle.
//
// Whether the data is used is decided from the exchange's result, which is
// the same on every rank: only when every rank's lane names the same slot
// and size, and that slot is ready on every rank and invalid on none. Each
// rank set that bit only for its own hit on the slot, so every rank then
// holds an entry of the cached response's dtype and shape with the same
// prescale; each reduces the lanes in rank order into the response
// (Response::reduced_in_negotiation), and the executor only unpacks, through
// the same finish (average, postscale) as ever. The order and the arithmetic
// (reduceInto, float16 and bfloat16 through float) are those of shared
// memory's small allreduce, so the bits are the same as that path's; over
// TCP or MPI with three ranks or more, a floating-point sum may round
// differently from theirs (their order is their own), but never differently
// on two ranks. In any other case the lanes are ignored and the cached
// response runs through the executor as it always did, on every rank alike.
// Joins (no hit is set while a rank has joined, and a joined rank carries
// nothing), stalls and demotions (a request sent in full keeps its rank from
// carrying), invalidations, shutdown and the timeline see the same cycle as
// before: the bits and flags are those of today's exchange.
//
// The size bound: 16 bytes covers a scalar or a pair of any dtype (a sum and
// a count in float64) and four float32 metrics; each data word is paid by
// every cycle of every job of 2 to kMaxRanks ranks, and a larger set would
// AND a lane per rank on every rank (shared memory) for a call that saves
// one exchange of many.

size_t ExchangeLanes::wordsFor(int size) {
  if (size < 2 || size > kMaxRanks) return 0;
  return static_cast<size_t>(size) * kLaneWords;
}

void carryIfSmall(const TensorEntry& e, CarriedData& out) {
  out.bytes = 0;
  if (e.op != OpType::kAllreduce || e.reduce_op == ReduceOp::kAdasum || e.device >= 0 || !e.group.empty() ||
      !e.input) {
    return;
  }
  size_t count = 1;
  const size_t element = dtypeSize(e.dtype);
  for (int64_t d : e.shape) {
    if (d < 0 || static_cast<uint64_t>(d) > CarriedData::kMaxBytes) return;
    count *= static_cast<size_t>(d);
    if (count * element > CarriedData::kMaxBytes) return;
  }
  if (count == 0) return;
  out.bytes = static_cast<uint32_t>(count * element);
  // scaleInto copies when the factor is 1; a copy of a few bytes is ~100
  // instructions cheaper without its dispatch (every call of the loop's path).
  if (e.prescale == 1.0) std::memcpy(out.words, e.input, out.bytes);
  else scaleInto(out.words, e.input, count, e.dtype, e.prescale);
}

void ExchangeLanes::carry(int rank, size_t slot, const CarriedData& data) {
  uint64_t* mine = words_ + static_cast<size_t>(rank) * kLaneWords;
  mine[0] = (uint64_t{data.bytes} << 32) | slot;
  // Only the header's byte count of the data is ever read.
  std::memcpy(mine + 1, data.words, sizeof(data.words));
}

std::optional<size_t> ExchangeLanes::agreedSlot(size_t* bytes) const {
  const uint64_t header = lane(0)[0];
  for (int r = 1; r < size_; ++r) {
    if (lane(r)[0] != header) return std::nullopt;
  }
  // All ones: rank 0 carried nothing. A size is checked before it is read
  // (Note [Checked peer messages] in message.cc).
  const size_t carried = header >> 32;
  if (carried == 0 || carried > CarriedData::kMaxBytes) return std::nullopt;
  *bytes = carried;
  return static_cast<size_t>(header & 0xffffffffu);
}

void ExchangeLanes::reduce(const Response& response, size_t bytes, std::vector<uint8_t>& out) const {
  const size_t count = bytes / dtypeSize(response.dtype);
  // Assigned, not resized and copied: no zero fill of what is overwritten.
  const auto* first = reinterpret_cast<const uint8_t*>(lane(0) + 1);
  out.assign(first, first + bytes);
  for (int r = 1; r < size_; ++r) reduceInto(out.data(), lane(r) + 1, count, response.dtype, wireOp(response));
}

}  // namespace hvdlite::core
