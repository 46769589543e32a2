#include "transport/cuda/dynamic_library.h"

#include <dlfcn.h>
#include <link.h>

namespace hvdlite::transport::cuda {
namespace {

constexpr const char* kLoadedPrefix = "loaded:";

}  // namespace

std::string alreadyLoaded(const std::string& file_name) { return kLoadedPrefix + file_name; }

DynamicLibrary::DynamicLibrary(const std::vector<std::string>& candidates, SymbolScope scope) {
  for (const auto& candidate : candidates) {
    // RTLD_NODELETE: the CUDA runtime registers exit handlers and hands out
    // handles that outlive us (events, streams); unmapping it is never safe.
    int flags = RTLD_NOW | RTLD_NODELETE | (scope == SymbolScope::kGlobal ? RTLD_GLOBAL : RTLD_LOCAL);
    std::string name = candidate;
    bool probe = candidate.rfind(kLoadedPrefix, 0) == 0;
    if (probe) {
      name = candidate.substr(std::string(kLoadedPrefix).size());
      flags |= RTLD_NOLOAD;
    }
    dlerror();
    handle_ = dlopen(name.c_str(), flags);
    if (handle_) {
      path_ = name;
      return;
    }
    const char* why = dlerror();
    if (probe) continue;  // not loaded yet is not a failure worth reporting
    failures_ += "  " + name + ": " + (why ? why : "cannot be opened") + "\n";
  }
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_) dlclose(handle_);
}

std::string DynamicLibrary::location() const {
  struct link_map* map = nullptr;
  if (handle_ && dlinfo(handle_, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) {
    return map->l_name;
  }
  return path_;
}

void* DynamicLibrary::symbol(const char* name) const {
  if (!handle_) return nullptr;
  return dlsym(handle_, name);
}

}  // namespace hvdlite::transport::cuda
