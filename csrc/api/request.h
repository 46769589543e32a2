// The one way a request from a binding (api.h's hvdlite_request, filled by
// hvdlite._core and by the TF op library through hvdlite_enqueue) becomes a
// core::TensorEntry.
#pragma once

#include "api/api.h"
#include "core/call_site.h"
#include "core/tensor_entry.h"

namespace hvdlite::api {

// Checks the request's codes and structure: every code in range (op, dtype,
// reduce op, flags), no negative count (ndim, num_splits, ...), no NULL where
// a count says there is data, a name, finite scale factors, a device >= -1.
// A bad one throws InvalidArgument naming the tensor and the bad value, in
// the caller's thread, before anything is queued.
//
// What depends on the running job (process set membership, the root rank
// within its set, splits against the set size, matching ranks) is checked
// later by core/entry_validation.cc when the Runtime takes the entry.
// Callback and allocator are left for the caller to set. A call site in the
// request is interned in `sites` (none: the entry gets none; the Python
// binding sets its own, already interned).
core::TensorEntryPtr buildEntry(const hvdlite_request& request, core::CallSiteTable* sites = nullptr);

}  // namespace hvdlite::api
