// The words of the coordinator's reports about ranks that wait on each
// other (mismatch, stall, divergence): each rank with what it submitted or
// waits on and where in its program (Note [Call sites]), as text for people
// and as ErrorDetails for programs.
#pragma once

#include <string>
#include <vector>

#include "core/error_details.h"
#include "core/message.h"

namespace hvdlite::core {

// What one rank of a process set is waiting on, as the coordinator sees it.
struct RankWaits {
  int global_rank = 0;
  bool joined = false;   // it called join() and waits for the others
  bool blocked = false;  // a thread of it is blocked until a collective completes
  std::vector<const Request*> requests;  // what it submitted and still waits on, oldest first
};

// " at train.py:42 in step()", or "" when the site is unknown.
std::string atSite(const CallSite& site);
// A request's call site, or an unknown one.
const CallSite& siteOf(const Request& request);

// "'b' (allgather) at w.py:20 in main()": one request, for a list.
std::string describeRequest(const Request& request);

// What a rank waits on, for a report line after "rank 1: " or "ranks [0,
// 2]: ": "waiting on 'b' (allgather) at w.py:20 in main()", "waiting on 3
// collectives: ...", "in join()", or "nothing submitted to this process set
// (...)", then " [blocked]" when a thread of it is blocked. `instead`: it is
// not waiting on the tensor the line is under ("waiting instead on ...").
std::string describeWaits(const RankWaits& rank, bool instead = false);

// Every rank's line of a divergence report, and what comes before and after
// it (Note [Divergence] in coordinator.cc).
std::string divergenceReport(const std::vector<RankWaits>& ranks, double waited_s);

// One RankCall per request of `rank` (or one without a tensor when it waits
// on nothing), appended to `details`.
void addCalls(const RankWaits& rank, ErrorDetails& details);

}  // namespace hvdlite::core
