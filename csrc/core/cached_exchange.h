// One exchange for a cached small allreduce: the lanes a cycle's cache-bit
// exchange carries, so that the exchange that agrees a lone cached allreduce
// of a few bytes is ready on every rank also gathers its data (Note [One
// exchange for a cached small allreduce] in cached_exchange.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/message.h"
#include "core/tensor_entry.h"

namespace hvdlite::core {

// This rank's contribution to a small allreduce as packRange would pack it
// (prescaled), copied from its entry when its request is admitted.
struct CarriedData {
  static constexpr size_t kWords = 2;
  static constexpr size_t kMaxBytes = kWords * sizeof(uint64_t);
  uint32_t bytes = 0;  // 0: this request cannot ride the exchange
  uint64_t words[kWords] = {};
};

// Fills `out` from `entry` when it can ride the exchange (a host allreduce,
// not Adasum, in no group, with an input, of 1 to CarriedData::kMaxBytes bytes); otherwise
// sets out.bytes to 0.
void carryIfSmall(const TensorEntry& entry, CarriedData& out);

// The lanes at the end of a cycle's bit vector: one per rank of the set, a
// header word (the cache slot and the byte count; all ones: nothing carried)
// and CarriedData::kWords of data. A rank writes only its own lane and
// leaves every other lane all ones, so the bitwise-AND allreduce of the bit
// vector hands every rank each lane intact: an allgather inside the AND.
class ExchangeLanes {
 public:
  // Larger sets carry no lanes: the exchange would grow by a lane per rank
  // on every cycle, and shared memory ANDs every rank's copy of it.
  static constexpr int kMaxRanks = 8;
  static constexpr size_t kLaneWords = 1 + CarriedData::kWords;
  // Words of lanes for a set of `size` ranks: 0 for one rank or more than kMaxRanks.
  static size_t wordsFor(int size);

  // `words`: wordsFor(size) words, all ones before anything is carried.
  ExchangeLanes(uint64_t* words, int size) : words_(words), size_(size) {}

  // Writes `data` for cache slot `slot` into `rank`'s lane.
  void carry(int rank, size_t slot, const CarriedData& data);
  // After the AND: the slot every rank's lane carries, with its byte count
  // in `bytes`; nullopt when some rank carried nothing, or another slot or
  // size than the others, or a size no rank can carry.
  std::optional<size_t> agreedSlot(size_t* bytes) const;
  // The lanes' data reduced in rank order, as shared memory's allreduce
  // reduces the ranks' slots, with `response`'s wire op: `bytes` bytes into
  // `out` (replacing what it held). Every rank computes the same bits.
  void reduce(const Response& response, size_t bytes, std::vector<uint8_t>& out) const;

 private:
  const uint64_t* lane(int rank) const { return words_ + static_cast<size_t>(rank) * kLaneWords; }

  uint64_t* words_;
  int size_;
};

}  // namespace hvdlite::core
