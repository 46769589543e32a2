#include "core/response_cache.h"

#include <algorithm>

#include "common/errors.h"

namespace hvdlite::core {

ResponseCache::ResponseCache(size_t capacity)
    : capacity_(capacity), slots_(capacity), lru_pos_(capacity) {}

ResponseCache::Match ResponseCache::lookup(const Request& request, size_t* slot) const {
  auto it = by_name_.find(request.name);
  if (it == by_name_.end()) return Match::kMiss;
  *slot = it->second;
  return slots_[it->second].request.sameParameters(request) ? Match::kHit : Match::kStale;
}

std::optional<size_t> ResponseCache::slotOf(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

void ResponseCache::put(const Response& response, const Request& own_request) {
  if (capacity_ == 0) return;
  if (auto existing = slotOf(response.name)) erase(*existing);
  size_t slot = capacity_;
  if (by_name_.size() < capacity_) {
    // Lowest free slot: deterministic, so every rank picks the same one.
    for (size_t i = 0; i < capacity_; ++i) {
      if (!slots_[i].used) {
        slot = i;
        break;
      }
    }
  } else {
    slot = lru_.back();
    erase(slot);
  }
  HVD_CHECK(slot < capacity_, "no free cache slot");
  slots_[slot] = Slot{true, ++last_stamp_, response, own_request};
  slots_in_use_ = std::max(slots_in_use_, slot + 1);
  by_name_[response.name] = slot;
  lru_.push_front(slot);
  lru_pos_[slot] = lru_.begin();
}

const Response& ResponseCache::response(size_t slot) const {
  HVD_CHECK(slot < capacity_ && slots_[slot].used, "cache slot ", slot, " is empty");
  return slots_[slot].response;
}

void ResponseCache::touch(size_t slot) {
  HVD_CHECK(slots_[slot].used, "touching empty cache slot ", slot);
  lru_.splice(lru_.begin(), lru_, lru_pos_[slot]);
}

void ResponseCache::erase(size_t slot) {
  if (slot >= capacity_ || !slots_[slot].used) return;
  by_name_.erase(slots_[slot].response.name);
  lru_.erase(lru_pos_[slot]);
  slots_[slot] = Slot{};
}

}  // namespace hvdlite::core
