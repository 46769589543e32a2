#include "core/call_site.h"

namespace hvdlite::core {

std::string CallSite::text() const {
  if (!known()) return "call site unknown";
  std::string out = file + ":" + std::to_string(line);
  if (!function.empty()) out += " in " + function + "()";
  return out;
}

const CallSite* CallSiteTable::intern(const CallSite& site) {
  if (!site.known()) return nullptr;
  // NUL cannot occur in a path or a function name: an unambiguous key.
  std::string key = site.file + '\0' + std::to_string(site.line) + '\0' + site.function;
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = sites_[key];
  if (!slot) slot = std::make_unique<const CallSite>(site);
  return slot.get();
}

size_t CallSiteTable::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sites_.size();
}

}  // namespace hvdlite::core
