// Note [Cache bits]
// Once a tensor has been negotiated, every rank stores the response in the
// same slot of its cache: slots are assigned, touched and evicted only while
// executing the response lists the coordinator broadcast, which every rank
// executes identically, so slot i means the same tensor everywhere. In later
// cycles a rank that has that tensor ready with the same parameters sets bit
// i; one bitwise-AND allreduce tells every rank which cached tensors are ready
// everywhere, with no names on the wire. A rank whose request no longer
// matches its slot (new shape, say) sets the slot's invalid bit instead; every
// rank then drops the slot and the tensor is negotiated in full again.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/message.h"

namespace hvdlite::core {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity);

  size_t capacity() const { return capacity_; }
  // One past the highest slot ever filled: the same on every rank, like the
  // slots themselves, so the cache bits of the slots below it are all a
  // cycle's exchange needs to carry (Note [Cache bits as far as used]).
  size_t slotsInUse() const { return slots_in_use_; }

  enum class Match { kMiss, kHit, kStale };
  // kHit: the slot of `name` was made from a request equal to `request`.
  Match lookup(const Request& request, size_t* slot) const;
  std::optional<size_t> slotOf(const std::string& name) const;

  // Stores a response and this rank's own request for it, evicting the least
  // recently used slot if full. No-op when capacity is 0.
  void put(const Response& response, const Request& own_request);
  const Response& response(size_t slot) const;
  // Different for every put() of the controller's life, 0 for an empty slot:
  // a copy of response(slot) made under the same stamp is still equal to it
  // (Note [Cached responses copied once] in controller.cc).
  uint64_t stamp(size_t slot) const { return slots_[slot].stamp; }
  void touch(size_t slot);  // mark as most recently used
  void erase(size_t slot);

 private:
  struct Slot {
    bool used = false;
    uint64_t stamp = 0;
    Response response;
    Request request;
  };
  size_t capacity_;
  size_t slots_in_use_ = 0;
  uint64_t last_stamp_ = 0;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, size_t> by_name_;
  std::list<size_t> lru_;  // front = most recent
  std::vector<std::list<size_t>::iterator> lru_pos_;
};

}  // namespace hvdlite::core
