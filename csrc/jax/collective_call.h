// What one of hvdlite's XLA custom calls does once XLA has handed over its
// buffers: queue one request per array through api.h, then either block until
// the core has completed all of them (runCall: the CUDA handler) or return at
// once and be told when they have (startCall: the CPU handler's asynchronous
// calls, Note [Asynchronous calls on the CPU] in collective_handler.cc). Free of XLA's headers, so that the
// handlers (collective_handler.cc) stay a thin decoding layer and a test can
// drive this part on the fake GPU without XLA (tests/jax/fake_gpu_call.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "api/api.h"

namespace hvdlite::jax_ffi {

// Where a call's buffers live: host memory (device -1), or GPU `device`
// with XLA's stream (Note [XLA's stream] in collective_handler.cc).
struct Placement {
  int32_t device = -1;
  void* stream = nullptr;
};

// Where the step's code called one collective.
struct CallSite {
  std::string file;
  int32_t line = 0;
  std::string function;
};

// Note [A call site per array]
// The CPU lowering merges a step's separate collectives into one custom call
// (Note [One custom call for a step's collectives] in
// hvdlite/jax/merged_calls.py), each from its own line of the step, and a
// failure must still name the line of the array that failed. So the
// call_site attribute packs either one site ([file, line, function]) for all
// the call's arrays, or three such parts per array, in the arrays' order.

// The call's attributes, as hvdlite/jax/ffi.py's lowering sets them.
struct CallAttributes {
  int32_t op = HVDLITE_OP_ALLREDUCE;
  int32_t reduce_op = HVDLITE_REDUCE_SUM;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root_rank = 0;
  int32_t process_set_id = 0;
  // Where the step's code called the collective when it was traced: one
  // site for every array, or one per array (Note [A call site per array]);
  // a site with an empty file is unknown (Note [Call sites] in
  // core/call_site.h).
  std::vector<CallSite> sites;
  // Each of `sites` interned in the core once, when unpackSite read it
  // (hvdlite_intern_call_site; Note [Sites interned once] in
  // collective_call.cc); null for an unknown one.
  std::vector<const void*> interned_sites;
  // What unpackSite last read them from: a handler's calls from one line of
  // the step (or one merged call) carry the same, read once (Note [A call
  // allocates little]).
  std::string site_packed;
  // What the handler last read its arrays' names from (Note [Names read
  // once] in collective_handler.cc); "" after a malformed one.
  std::string names_packed;

  // The site of array `index` of `count` as the core interned it, or
  // nullptr when unknown.
  const void* internedSiteOf(size_t index, size_t count) const;
};

// One array of the call. `output_shape` was fixed at trace time. The CPU
// handler fills the same ones call after call (Note [A call allocates
// little]): its strings and vectors keep their memory.
struct CallArray {
  std::string name;
  int32_t dtype = -1;  // api.h's code, -1 when hvdlite cannot carry it
  std::vector<int64_t> shape;
  const void* input = nullptr;
  void* output = nullptr;
  std::vector<int64_t> output_shape;
  size_t element_bytes = 0;
};

struct CallOutcome {
  int32_t status = HVDLITE_OK;  // hvdlite_status_kind of the first failure
  std::string error;
};

// Queues every array before waiting for any (so the core fuses them), then
// blocks the calling thread until each has completed; on a GPU, XLA's stream
// is then ordered after the work (Note [Ordered before done] in
// api/session.cc). Requires hvdlite to be initialized.
CallOutcome runCall(const CallAttributes& attributes, std::vector<CallArray>& arrays, Placement placement);

// Queues every array like runCall and returns without waiting: `done` runs
// once, with the outcome, when the core has completed every queued array
// (on the thread that ran the cycle: it must not block), or before this
// returns when nothing could be queued. `flags`: more hvdlite_request_flag
// bits for every request (HVDLITE_REQUEST_NO_WAKE when the caller drives
// the cycles). The arrays' buffers must stay valid until then.
void startCall(const CallAttributes& attributes, std::vector<CallArray>& arrays, Placement placement,
               std::function<void(CallOutcome)> done, uint32_t flags = 0);

// "<length>:<name>" each, as hvdlite/jax/ffi.py packs names (any character
// may appear in a name), appended to `names` as views into `packed`; false
// when `packed` is malformed.
bool unpackNames(std::string_view packed, std::vector<std::string_view>* names);

// The call sites packed like names as [file, line, function], once or once
// per array (Note [A call site per array]), into attributes' sites, and
// each interned in the core (at once when they were read from the same
// `packed` last time); false (and every site left unknown) when `packed` is
// empty or malformed. Requires hvdlite's library to be loaded.
bool unpackSite(std::string_view packed, CallAttributes* attributes);

}  // namespace hvdlite::jax_ffi
