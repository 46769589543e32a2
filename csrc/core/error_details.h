// The structured part of a failure: which tensors, ranks, hosts and call
// sites it is about, for programs that read errors (the elastic driver reads
// the lost hosts from here, never from the message).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/call_site.h"

namespace hvdlite::core {

// One rank's part in a failure: the collective it submitted or waits on, and
// where it called it.
struct RankCall {
  int32_t rank = -1;    // global rank
  std::string tensor;   // the tensor's name ("" for a rank waiting on nothing)
  std::string op;       // "allreduce", ...
  CallSite site;
  std::string value;    // a mismatch: this rank's value of the disagreeing field
  bool blocked = false; // the rank is blocked waiting (synchronize(), join(), barrier(), a TF/JAX op)
};

struct ErrorDetails {
  std::vector<std::string> tensor_names;  // the tensors that failed
  // The ranks the failure is about (global): those that disagree (a
  // mismatch), every rank of the set (a divergence), the missing ones (a
  // stall), the lost ones (a lost peer), those that asked to shut down.
  std::vector<int32_t> ranks;
  std::vector<int32_t> missing_ranks;   // ranks that never submitted the tensor (stall, shutdown)
  std::vector<std::string> hosts;       // the hosts of `ranks` where known, in the same order
  std::vector<std::string> lost_hosts;  // hosts that stopped answering (HVDLITE_PEER_TIMEOUT_SECONDS)
  std::string field;                    // a mismatch: the field the ranks disagree on
  std::vector<RankCall> calls;          // every rank's part, with its call site

  bool empty() const {
    return tensor_names.empty() && ranks.empty() && missing_ranks.empty() && hosts.empty() && lost_hosts.empty() &&
           field.empty() && calls.empty();
  }
};

}  // namespace hvdlite::core
