// The coordinator's side of negotiation (set rank 0 only): collects requests
// from every rank, decides when a tensor is ready everywhere, checks that the
// ranks agree on it, and turns it into a Response.
//
// Ranks reach gradients in different orders, so nothing runs until rank 0 has
// heard the same name from every rank (or the rank has joined: Note [Join]).
#pragma once

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/message.h"
#include "core/wait_report.h"

namespace hvdlite::core {

using Clock = std::chrono::steady_clock;

class Coordinator {
 public:
  // global_ranks[r] is the global rank of set rank r (for messages).
  // average_active: an Average divides by the ranks that have not joined
  // instead of the set's size (HVDLITE_JOIN_AVERAGE_ACTIVE).
  explicit Coordinator(std::vector<int> global_ranks, bool average_active = false);

  // The requests set rank `sender` sent (the rank of the connection they came
  // on). A request's wait began waited_ms before `now` (Note [Divergence]);
  // a tensor has waited since the first of its ranks began to. Throws
  // BadPeerMessage naming the sender when a request fails its checks (Note
  // [Checked peer messages] in message.cc): one claiming another rank, a
  // shape whose size overflows, alltoall splits that do not match, a root or
  // process-set rank out of range; nothing of that list is added then.
  void add(int sender, const std::vector<Request>& requests, Clock::time_point now);
  // What set rank `rank` said about itself in this round trip.
  void setRankState(int rank, const RankState& state);
  // Cached responses completed (no request of theirs reached the
  // coordinator): the set is making progress (Note [Divergence]).
  void noteProgress(Clock::time_point now) { last_response_ = std::max(last_response_, now); }

  // Responses for every tensor now ready on all ranks, in the order they
  // became ready; grouped tensors are held until their whole group is ready.
  std::vector<Response> takeReady();

  // Tensors waiting longer than warn_after, and a join waiting that long with
  // nothing else completing (Note [Stalled join]): a human-readable report
  // (empty if none, or if one was made less than warn_after ago).
  std::string stallReport(Clock::time_point now, std::chrono::duration<double> warn_after);
  // Error responses for tensors (and a join) waiting longer than fail_after.
  std::vector<Response> failStalled(Clock::time_point now, std::chrono::duration<double> fail_after);

  // Note [Divergence]. The report when every rank of the set has waited at
  // least warn_after on collectives none of which every rank submitted
  // (empty when not, or when this divergence was already reported).
  std::string divergenceReport(Clock::time_point now, std::chrono::duration<double> warn_after);
  // Error responses (StatusKind::kDivergence) for everything the set waits
  // on, once a divergence has lasted fail_after and every rank is blocked;
  // `consequence` ends each message.
  std::vector<Response> failDiverged(Clock::time_point now, std::chrono::duration<double> fail_after,
                                     const std::string& consequence);

  bool anyJoined() const { return !joined_.empty(); }

 private:
  struct Pending {
    std::vector<std::optional<Request>> by_rank;
    Clock::time_point first_seen;
    std::vector<Clock::time_point> arrived;  // per rank: when it began to wait on it
  };
  // Why `request` from set rank `sender` cannot be taken ("" if it can).
  std::string problemWith(const Request& request, int sender) const;
  bool isReady(const Pending& pending) const;
  Response build(const std::string& name, const Pending& pending) const;
  // Which field the ranks disagree on ("" when none) and each one's value.
  std::string disagreement(const std::vector<const Request*>& requests, std::string* text) const;
  std::string rankList(const std::vector<int>& set_ranks) const;
  void addJoin(const Request& request, Clock::time_point now);
  bool joinStalled(Clock::time_point now, std::chrono::duration<double> after) const;
  std::vector<int> notJoined() const;
  void releaseGroups(std::vector<Response>& ready);
  std::vector<RankWaits> rankWaits() const;
  std::string rankLines(const std::string& name, const Pending& pending,
                        const std::vector<RankWaits>& waits) const;
  std::optional<Clock::time_point> divergentSince() const;
  Response failure(const std::string& name, const Request& any, StatusKind kind, const std::string& message,
                   std::shared_ptr<const ErrorDetails> details) const;

  std::vector<int> global_ranks_;
  int size_;
  bool average_active_;
  std::map<std::string, Pending> table_;
  std::vector<std::string> arrival_order_;
  std::set<int> joined_;
  int last_joined_ = -1;
  Clock::time_point join_since_{};     // when the first rank of the pending join joined
  Clock::time_point last_response_{};  // when takeReady last returned something
  std::map<std::string, std::vector<Response>> held_groups_;
  Clock::time_point last_stall_report_{};
  std::vector<bool> blocked_;                      // per set rank, as of the last round trip
  std::optional<Clock::time_point> diverged_reported_;  // the divergence last reported
};

}  // namespace hvdlite::core
