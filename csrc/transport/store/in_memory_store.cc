#include "common/errors.h"
#include "transport/store.h"

namespace hvdlite::transport {

void InMemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = value;
  }
  changed_.notify_all();
}

// A negative timeout waits without limit, as the launcher's store does; so
// does an absurdly long one, which wait_for could overflow.
std::string InMemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto present = [&] { return values_.count(key) != 0; };
  if (timeout.count() < 0 || timeout > std::chrono::hours(24 * 365)) {
    changed_.wait(lock, present);
  } else if (!changed_.wait_for(lock, timeout, present)) {
    throw Timeout(detail::concat("key '", key, "' did not appear in the store within ",
                                 timeout.count(), " ms"));
  }
  return values_[key];
}

int64_t InMemoryStore::add(const std::string& key, int64_t delta) {
  int64_t result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = values_.find(key);
    int64_t current = 0;
    if (it != values_.end()) {
      try {
        size_t used = 0;
        current = std::stoll(it->second, &used);
        if (used != it->second.size()) throw std::invalid_argument("trailing characters");
      } catch (const std::exception&) {
        throw InvalidArgument(detail::concat("store key '", key,
                                             "' does not hold a decimal integer: '",
                                             it->second.substr(0, 40), "'"));
      }
    }
    result = current + delta;
    values_[key] = std::to_string(result);
  }
  changed_.notify_all();
  return result;
}

bool InMemoryStore::tryGet(const std::string& key, std::string* value) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  if (value != nullptr) *value = it->second;
  return true;
}

}  // namespace hvdlite::transport
