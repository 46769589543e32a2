#include "core/wait_report.h"

#include <algorithm>
#include <cstdio>

namespace hvdlite::core {
namespace {

// A rank waiting on more names than this lists the oldest ones and a count.
constexpr size_t kListed = 4;

}  // namespace

std::string atSite(const CallSite& site) { return site.known() ? " at " + site.text() : std::string(); }

const CallSite& siteOf(const Request& request) {
  static const CallSite kUnknown;
  return request.call_site ? *request.call_site : kUnknown;
}

std::string describeRequest(const Request& request) {
  return "'" + request.name + "' (" + opTypeName(request.op) + ")" + atSite(siteOf(request));
}

std::string describeWaits(const RankWaits& rank, bool instead) {
  std::string out;
  if (rank.joined) {
    out = "in join()";
  } else if (rank.requests.empty()) {
    return "nothing submitted to this process set (computing, stopped, or finished without join())";
  } else if (rank.requests.size() == 1) {
    out = std::string(instead ? "waiting instead on " : "waiting on ") + describeRequest(*rank.requests.front());
  } else {
    out = std::string(instead ? "waiting instead on " : "waiting on ") + std::to_string(rank.requests.size()) +
          " collectives: ";
    for (size_t i = 0; i < rank.requests.size() && i < kListed; ++i) {
      out += (i ? ", " : "") + describeRequest(*rank.requests[i]);
    }
    if (rank.requests.size() > kListed) {
      out += ", and " + std::to_string(rank.requests.size() - kListed) + " more";
    }
  }
  if (rank.blocked) out += " [blocked]";
  return out;
}

std::string divergenceReport(const std::vector<RankWaits>& ranks, double waited_s) {
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", waited_s);
  std::string out = std::string("the ranks wait on different collectives, so none can complete (for ") +
                    seconds + " s):";
  for (const auto& rank : ranks) {
    out += "\n  rank " + std::to_string(rank.global_rank) + ": " + describeWaits(rank);
  }
  out +=
      "\nEvery rank of a process set must submit the same collectives, in an order that lets each "
      "complete: look at these call sites for a rank that took another branch, skipped a step, or "
      "orders its collectives differently. [blocked]: a thread of that rank waits for one of them "
      "(synchronize(), a blocking collective, join(), barrier(), a TensorFlow or JAX op).";
  return out;
}

void addCalls(const RankWaits& rank, ErrorDetails& details) {
  if (rank.requests.empty()) {
    RankCall call;
    call.rank = rank.global_rank;
    call.op = rank.joined ? "join" : "";
    call.blocked = rank.blocked;
    details.calls.push_back(call);
    return;
  }
  for (const Request* request : rank.requests) {
    RankCall call;
    call.rank = rank.global_rank;
    call.tensor = request->name;
    call.op = opTypeName(request->op);
    call.site = siteOf(*request);
    call.blocked = rank.blocked;
    details.calls.push_back(call);
  }
}

}  // namespace hvdlite::core
