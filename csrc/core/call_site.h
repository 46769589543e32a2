// Where in the user's program a collective was called: the first frame of
// the program (not hvdlite's, nor the framework's) on the submitting thread,
// or, for an op built into a graph (tf.function, jax.jit), where it was traced.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace hvdlite::core {

// Note [Call sites]
// Ranks that stop agreeing (one takes another branch, skips a step, or
// orders its collectives differently) are found by what they wait on; a
// person fixes them by where each one waits. So every entry carries the call
// site its binding captured at submission, and every report that names ranks
// (a mismatch, a stall, a divergence) says where each one was.
// A submission must not pay for it: bindings intern a site once
// (CallSiteTable) and an entry holds a pointer to it, so the hot path copies
// no string; the site crosses to the coordinator only inside a full request
// (a name's first negotiation, or one that waited long: Note [Demoting to
// find divergence] in controller.cc), never with cache bits, so the steady
// state sends nothing more. HVDLITE_CALL_SITES=0 turns capture off: the
// reports then say "call site unknown".
struct CallSite {
  std::string file;
  int32_t line = 0;
  std::string function;

  bool known() const { return !file.empty(); }
  // "train.py:42 in step()", or "call site unknown".
  std::string text() const;
  bool operator==(const CallSite& other) const {
    return line == other.line && file == other.file && function == other.function;
  }
};

// Call sites interned for the life of the process: an entry points at one
// (Note [Call sites]), so they are never freed. Thread-safe.
class CallSiteTable {
 public:
  // The one interned copy of `site`; null when the site is unknown.
  const CallSite* intern(const CallSite& site);
  // The same from its parts, allocating nothing for a site seen before
  // (Note [Interning without allocating] in call_site.cc).
  const CallSite* intern(std::string_view file, int32_t line, std::string_view function);
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<const CallSite>> sites_;
};

}  // namespace hvdlite::core
