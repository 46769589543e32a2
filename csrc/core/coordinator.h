// The coordinator's side of negotiation (set rank 0 only): collects requests
// from every rank, decides when a tensor is ready everywhere, checks that the
// ranks agree on it, and turns it into a Response.
//
// Ranks reach gradients in different orders, so nothing runs until rank 0 has
// heard the same name from every rank (or the rank has joined: Note [Join]).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/message.h"

namespace hvdlite::core {

using Clock = std::chrono::steady_clock;

class Coordinator {
 public:
  // global_ranks[r] is the global rank of set rank r (for messages).
  // average_active: an Average divides by the ranks that have not joined
  // instead of the set's size (HVDLITE_JOIN_AVERAGE_ACTIVE).
  explicit Coordinator(std::vector<int> global_ranks, bool average_active = false);

  void add(const std::vector<Request>& requests, Clock::time_point now);

  // Responses for every tensor now ready on all ranks, in the order they
  // became ready; grouped tensors are held until their whole group is ready.
  std::vector<Response> takeReady();

  // Tensors waiting longer than warn_after, and a join waiting that long with
  // nothing else completing (Note [Stalled join]): a human-readable report
  // (empty if none, or if one was made less than warn_after ago).
  std::string stallReport(Clock::time_point now, std::chrono::duration<double> warn_after);
  // Error responses for tensors (and a join) waiting longer than fail_after.
  std::vector<Response> failStalled(Clock::time_point now, std::chrono::duration<double> fail_after);

  bool anyJoined() const { return !joined_.empty(); }

 private:
  struct Pending {
    std::vector<std::optional<Request>> by_rank;
    Clock::time_point first_seen;
  };
  bool isReady(const Pending& pending) const;
  Response build(const std::string& name, const Pending& pending) const;
  std::optional<std::string> disagreement(const std::vector<const Request*>& requests) const;
  std::string rankList(const std::vector<int>& set_ranks) const;
  void addJoin(const Request& request, Clock::time_point now);
  bool joinStalled(Clock::time_point now, std::chrono::duration<double> after) const;
  std::vector<int> notJoined() const;
  void releaseGroups(std::vector<Response>& ready);

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
};

}  // namespace hvdlite::core
