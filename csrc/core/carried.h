// Small allreduces whose data travels with the negotiation's cache bits
// (Note [Tensors carried by the negotiation] in carried.cc): which of a
// rank's ready tensors it sends, how every rank reduces them alike, and how
// their entries complete without a collective of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/message.h"
#include "core/response_cache.h"
#include "core/tensor_queue.h"
#include "core/timeline.h"
#include "transport/communicator.h"

namespace hvdlite::core {

// The bytes each rank appends to its cache bits for carried tensors, and the
// largest process set that carries them: the exchange becomes an allgather,
// which between 2 ranks is one exchange like the bits' allreduce, but over
// TCP takes n-1 ring steps where the allreduce takes log2(n): at 2 hosts x 2
// ranks carrying made a 4-byte allreduce 2x slower (bench/RESULTS.md).
constexpr size_t kCarryBytes = 256;
constexpr int kCarryMaxRanks = 2;

// Where one carried tensor's bytes sit in its rank's part of the exchange.
struct CarriedSlot {
  size_t slot;
  size_t offset;  // from the start of the carried bytes
  size_t bytes;
};

// Whether a cached response can be carried: an allreduce of host memory
// whose reduction any rank can finish alone (not Adasum).
bool carriable(const Response& r);

// The tensors a rank carries, given the cache slots it marked ready (in
// increasing order): each carriable one, in slot order, while it fits in
// `budget` bytes. Every rank computes any other rank's layout from that
// rank's ready bits and the cache, which is the same on every member.
std::vector<CarriedSlot> carriedLayout(const std::vector<size_t>& ready_slots, const ResponseCache& cache,
                                       size_t budget);

// The result of `r` from each member's bytes of it (`parts`, in rank order),
// computed as the shared-memory allreduce does for small tensors: each part
// prescaled, rank 0's reduced with each next rank's in order, then averaged
// and postscaled. Every rank gets bitwise the same bytes.
std::vector<uint8_t> reduceCarried(const Response& r, const std::vector<const uint8_t*>& parts);

// Completes responses whose results were carried (results[i] is
// responses[i]'s): writes each into its entry's output, ends its timeline
// op and runs its callback, as the executor does for a batch. Throws
// BadPeerMessage where a response does not fit this rank's entry.
void completeCarried(const std::vector<Response>& responses, const std::vector<std::vector<uint8_t>>& results,
                     TensorQueue& queue, Timeline& timeline, const transport::Communicator& comm);

}  // namespace hvdlite::core
