#include "core/coordinator.h"

#include <algorithm>
#include <sstream>

#include "common/checked_math.h"
#include "common/errors.h"

namespace hvdlite::core {
namespace {

// Fields on which every rank's request must agree, per collective.
bool needsSameShape(OpType op) {
  return op == OpType::kAllreduce || op == OpType::kBroadcast || op == OpType::kReducescatter;
}
bool needsSameTrailingDims(OpType op) { return op == OpType::kAllgather || op == OpType::kAlltoall; }
bool usesReduceOp(OpType op) { return op == OpType::kAllreduce || op == OpType::kReducescatter; }
// Collectives whose result would silently depend on who has joined.
bool refusedWhileJoined(OpType op) {
  return op == OpType::kAllgather || op == OpType::kBroadcast || op == OpType::kAlltoall ||
         op == OpType::kReducescatter;
}

std::vector<int64_t> trailing(const std::vector<int64_t>& shape) {
  return shape.empty() ? shape : std::vector<int64_t>(shape.begin() + 1, shape.end());
}

std::string valueOf(const Request& r, const std::string& field) {
  std::ostringstream out;
  if (field == "operation") out << opTypeName(r.op);
  else if (field == "dtype") out << dtypeName(r.dtype);
  else if (field == "reduce op") out << reduceOpName(r.reduce_op);
  else if (field == "prescale factor") out << r.prescale;
  else if (field == "postscale factor") out << r.postscale;
  else if (field == "shape") out << shapeString(r.shape);
  else if (field == "shape after the first dimension") out << shapeString(trailing(r.shape));
  else if (field == "number of dimensions") out << r.shape.size();
  else if (field == "root rank") out << r.root_rank;
  // Each rank has its own GPU (cuda:local_rank), so only the kind must agree.
  else if (field == "device") out << (r.device < 0 ? "cpu" : "cuda");
  else if (field == "group") out << "'" << r.group << "' of " << r.group_size;
  else if (field == "process set ranks") out << shapeString(r.process_set_ranks);
  else if (field == "process set id") out << r.process_set_id;
  return out.str();
}

bool differs(const Request& a, const Request& b, const std::string& field) {
  return valueOf(a, field) != valueOf(b, field);
}

}  // namespace

Coordinator::Coordinator(std::vector<int> global_ranks, bool average_active)
    : global_ranks_(std::move(global_ranks)),
      size_(static_cast<int>(global_ranks_.size())),
      average_active_(average_active),
      blocked_(global_ranks_.size(), false) {}

// Note [Checked peer messages] in message.cc: what a request's fields mean,
// for this set. A rank's own entries passed entry validation before they
// became requests, so an honest rank never fails these; they stand between
// another process's bytes and the table, the responses every rank executes,
// and the buffers those size.
std::string Coordinator::problemWith(const Request& request, int sender) const {
  const std::string what = detail::concat(opTypeName(request.op), " of '", request.name, "'");
  if (request.rank != sender) {
    return detail::concat("an ", what, " claiming to come from rank ", request.rank,
                          " of the process set, on the connection of its rank ", sender);
  }
  if (!checkedProduct(request.shape, 0, static_cast<int64_t>(dtypeSize(request.dtype)))) {
    return detail::concat("an ", what, " of shape ", shapeString(request.shape),
                          ": a negative dimension, or more bytes than fit in 64 bits");
  }
  const bool needs_rows = request.op == OpType::kAllgather || request.op == OpType::kAlltoall ||
                          request.op == OpType::kReducescatter;
  if (needs_rows && request.shape.empty()) return "an " + what + " of a scalar";
  if (request.op == OpType::kAlltoall) {
    if (static_cast<int64_t>(request.splits.size()) != size_) {
      return detail::concat("an ", what, " with ", request.splits.size(), " splits for a set of ", size_, " ranks");
    }
    auto sum = checkedSum(request.splits);
    if (!sum || *sum != request.shape[0]) {
      return detail::concat("an ", what, " whose splits ", shapeString(request.splits),
                            " do not add up to its first dimension, ", request.shape[0]);
    }
  }
  if (request.op == OpType::kBroadcast && (request.root_rank < 0 || request.root_rank >= size_)) {
    return detail::concat("a ", what, " from root rank ", request.root_rank, " of a set of ", size_, " ranks");
  }
  if (request.device < -1) return detail::concat("an ", what, " on device ", request.device);
  if (!request.group.empty() && request.group_size < 1) {
    return detail::concat("an ", what, " in group '", request.group, "' of ", request.group_size, " members");
  }
  if (request.op == OpType::kAddProcessSet) {
    for (auto rank : request.process_set_ranks) {
      if (rank < 0 || rank >= size_) {
        return detail::concat("an ", what, " naming rank ", rank, " in a job of ", size_, " ranks");
      }
    }
  }
  // The global set (0) is never removed: the API refuses it (api/request.cc).
  if (request.op == OpType::kRemoveProcessSet && request.process_set_id < 1) {
    return detail::concat("a ", what, " of process set ", request.process_set_id);
  }
  return {};
}

void Coordinator::add(int sender, const std::vector<Request>& requests, Clock::time_point now) {
  HVD_CHECK(sender >= 0 && sender < size_, "requests from rank ", sender, " of a set of ", size_);
  for (const auto& request : requests) {
    const std::string problem = problemWith(request, sender);
    if (!problem.empty()) throwBadPeerMessage(global_ranks_[sender], "sent " + problem);
  }
  for (const auto& request : requests) {
    if (request.op == OpType::kJoin) {
      addJoin(request, now);
      continue;
    }
    // A request sent in full after waiting as cache bits began its wait
    // earlier: the stall and divergence times count from then.
    const auto arrived = now - std::chrono::milliseconds(request.waited_ms);
    auto [it, inserted] = table_.try_emplace(request.name);
    if (inserted) {
      it->second.by_rank.resize(size_);
      it->second.arrived.resize(size_);
      it->second.first_seen = arrived;
      arrival_order_.push_back(request.name);
    }
    it->second.by_rank[request.rank] = request;
    it->second.arrived[request.rank] = arrived;
    it->second.first_seen = std::min(it->second.first_seen, arrived);
  }
}

void Coordinator::setRankState(int rank, const RankState& state) {
  HVD_CHECK(rank >= 0 && rank < size_, "state from rank ", rank);
  blocked_[rank] = state.blocked;
}

// Note [Join]
// A rank that ran out of data calls join(); until every rank of the set has,
// the coordinator counts it as ready for every tensor, and it takes part in
// each allreduce with zeros (the neutral value of min, max and product for
// those ops), as in Horovod. An Average still divides by the set's size, so a
// joined rank weighs like a rank whose gradient is zero (PyTorch's Join
// context does the same); HVDLITE_JOIN_AVERAGE_ACTIVE divides by the ranks
// that have not joined instead. Allgather, broadcast, alltoall and
// reducescatter fail while a rank has joined: their result would depend on
// which rank ran out first. A response made while a rank has joined is never
// cached: the joined rank holds no request for it, and every rank must fill
// its cache alike (Note [Cache bits]). The join completes, with the last rank
// to join, once every rank of the set has joined; the joined state belongs to
// this set's coordinator alone, so other sets negotiate as before.
void Coordinator::addJoin(const Request& request, Clock::time_point now) {
  if (joined_.empty()) join_since_ = now;
  joined_.insert(request.rank);
  last_joined_ = request.rank;
}

bool Coordinator::isReady(const Pending& pending) const {
  for (int r = 0; r < size_; ++r) {
    if (!pending.by_rank[r] && !joined_.count(r)) return false;
  }
  return true;
}

std::vector<Response> Coordinator::takeReady() {
  std::vector<Response> ready;
  std::vector<std::string> still_waiting;
  for (const auto& name : arrival_order_) {
    auto it = table_.find(name);
    if (it == table_.end()) continue;
    if (!isReady(it->second)) {
      still_waiting.push_back(name);
      continue;
    }
    ready.push_back(build(name, it->second));
    table_.erase(it);
  }
  arrival_order_ = std::move(still_waiting);
  releaseGroups(ready);
  if (!ready.empty()) last_response_ = Clock::now();
  if (!joined_.empty() && static_cast<int>(joined_.size()) == size_) {
    Response join;
    join.op = OpType::kJoin;
    join.name = kJoinName;
    join.value = global_ranks_[last_joined_];
    ready.push_back(join);
    joined_.clear();
  }
  return ready;
}

// Grouped allreduce members are emitted together, so that fusion packs them
// into one buffer and they complete in the same cycle.
void Coordinator::releaseGroups(std::vector<Response>& ready) {
  std::vector<Response> out;
  for (auto& response : ready) {
    if (response.group.empty()) {
      out.push_back(std::move(response));
      continue;
    }
    auto& members = held_groups_[response.group];
    members.push_back(std::move(response));
    if (static_cast<int32_t>(members.size()) >= members.front().group_size) {
      for (auto& m : members) out.push_back(std::move(m));
      held_groups_.erase(out.back().group);
    }
  }
  ready = std::move(out);
}

std::string Coordinator::disagreement(const std::vector<const Request*>& rs, std::string* text) const {
  const Request& first = *rs.front();
  std::vector<std::string> fields = {"operation", "dtype", "device", "group"};
  if (usesReduceOp(first.op)) {
    fields.insert(fields.end(), {"reduce op", "prescale factor", "postscale factor"});
  }
  if (needsSameShape(first.op)) fields.push_back("shape");
  if (needsSameTrailingDims(first.op)) {
    fields.insert(fields.end(), {"number of dimensions", "shape after the first dimension"});
  }
  if (first.op == OpType::kBroadcast) fields.push_back("root rank");
  if (first.op == OpType::kAddProcessSet) fields.push_back("process set ranks");
  if (first.op == OpType::kRemoveProcessSet) fields.push_back("process set id");
  for (const auto& field : fields) {
    bool mismatch = std::any_of(rs.begin(), rs.end(), [&](const Request* r) {
      return differs(*r, first, field);
    });
    if (!mismatch) continue;
    std::ostringstream out;
    out << "mismatched " << field << " across ranks:";
    for (size_t i = 0; i < rs.size(); ++i) {
      out << (i ? "," : "") << " rank " << global_ranks_[rs[i]->rank] << " has "
          << valueOf(*rs[i], field) << atSite(siteOf(*rs[i]));
    }
    *text = out.str();
    return field;
  }
  return {};
}

Response Coordinator::build(const std::string& name, const Pending& pending) const {
  std::vector<const Request*> present;
  for (const auto& r : pending.by_rank) {
    if (r) present.push_back(&*r);
  }
  const Request& first = *present.front();
  Response response;
  response.name = name;
  response.op = first.op;
  response.average_ranks = average_active_ ? static_cast<int32_t>(present.size()) : size_;
  // Every rank's part, with its call site: the mismatched field's value, or
  // the op it asked for while others joined.
  auto details = std::make_shared<ErrorDetails>();
  details->tensor_names = {name};
  auto fail = [&](const std::string& why) {
    for (const Request* r : present) {
      details->ranks.push_back(global_ranks_[r->rank]);
      RankCall call;
      call.rank = global_ranks_[r->rank];
      call.tensor = name;
      call.op = opTypeName(r->op);
      call.site = siteOf(*r);
      if (!details->field.empty()) call.value = valueOf(*r, details->field);
      details->calls.push_back(std::move(call));
    }
    response.error = true;
    response.error_kind = StatusKind::kPrecondition;  // the ranks disagree; the job is healthy
    response.error_message = std::string(opTypeName(first.op)) + " of '" + name + "' failed: " + why;
    response.error_details = details;
    response.group = first.group;
    response.group_size = first.group_size;
    return response;
  };
  std::string why;
  details->field = disagreement(present, &why);
  if (!details->field.empty()) return fail(why);
  if (!joined_.empty() && refusedWhileJoined(first.op)) {
    return fail(std::string(opTypeName(first.op)) + " is not supported with join() at this time: rank(s) " +
                rankList(std::vector<int>(joined_.begin(), joined_.end())) +
                " have joined. Run it before any rank joins, or after join() has returned on every rank.");
  }
  response.reduce_op = first.reduce_op;
  response.dtype = first.dtype;
  response.root_rank = first.root_rank;
  response.prescale = first.prescale;
  response.postscale = first.postscale;
  response.shape = first.shape;
  response.device = first.device;
  response.group = first.group;
  response.group_size = first.group_size;
  if (first.op == OpType::kAllgather) {
    for (const auto& r : pending.by_rank) response.per_rank.push_back(r ? r->shape.at(0) : 0);
  } else if (first.op == OpType::kAlltoall) {
    for (const auto& r : pending.by_rank) {
      response.per_rank.insert(response.per_rank.end(), r->splits.begin(), r->splits.end());
    }
  }
  response.process_set_ranks = first.process_set_ranks;
  response.process_set_id = first.process_set_id;
  return response;
}

std::string Coordinator::rankList(const std::vector<int>& set_ranks) const {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < set_ranks.size(); ++i) out << (i ? ", " : "") << global_ranks_[set_ranks[i]];
  out << "]";
  return out.str();
}

// Note [Stalled join]
// A rank that joined waits, taking part with zeros, until every rank has
// joined: with uneven data the others may train on for long, and that is no
// stall as long as their collectives complete. A join is reported (and, past
// the shutdown time, failed on the joined ranks) only when it has waited that
// long and nothing else completed in the same time: the missing ranks neither
// joined nor submitted anything (they took another path around join(), or
// joined another process set).
bool Coordinator::joinStalled(Clock::time_point now, std::chrono::duration<double> after) const {
  return !joined_.empty() && now - join_since_ >= after && now - last_response_ >= after;
}

std::vector<int> Coordinator::notJoined() const {
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (!joined_.count(r)) missing.push_back(r);
  }
  return missing;
}

// Note [Call sites]: under each waiting tensor, where the ranks that
// submitted it called it, and what each missing rank waits on instead.
std::string Coordinator::rankLines(const std::string& name, const Pending& pending,
                                   const std::vector<RankWaits>& waits) const {
  // Ranks with the same line share it: a job of 64 ranks says it once.
  std::vector<std::pair<std::string, std::vector<int>>> lines;
  auto add = [&](const std::string& line, int set_rank) {
    auto it = std::find_if(lines.begin(), lines.end(), [&](const auto& l) { return l.first == line; });
    if (it == lines.end()) it = lines.insert(lines.end(), {line, {}});
    it->second.push_back(set_rank);
  };
  for (int r = 0; r < size_; ++r) {
    if (pending.by_rank[r]) {
      add("submitted it" + atSite(siteOf(*pending.by_rank[r])), r);
    } else if (!joined_.count(r)) {
      add(describeWaits(waits[r], true), r);
    }
  }
  std::string out;
  for (const auto& [line, ranks] : lines) {
    out += "\n      " + std::string(ranks.size() == 1 ? "rank " + std::to_string(global_ranks_[ranks[0]])
                                                       : "ranks " + rankList(ranks)) +
           ": " + line;
  }
  return out;
}

std::vector<RankWaits> Coordinator::rankWaits() const {
  std::vector<RankWaits> waits(size_);
  for (int r = 0; r < size_; ++r) {
    waits[r].global_rank = global_ranks_[r];
    waits[r].joined = joined_.count(r) > 0;
    waits[r].blocked = blocked_[r] || waits[r].joined;
  }
  for (const auto& name : arrival_order_) {
    const auto& pending = table_.at(name);
    for (int r = 0; r < size_; ++r) {
      if (pending.by_rank[r]) waits[r].requests.push_back(&*pending.by_rank[r]);
    }
  }
  return waits;
}

std::string Coordinator::stallReport(Clock::time_point now, std::chrono::duration<double> warn_after) {
  if (now - last_stall_report_ < warn_after) return {};
  // A report names where each rank is for the first few tensors; the rest
  // are listed one line each (a stuck step can hold hundreds of gradients).
  constexpr int kDetailed = 8;
  std::ostringstream out;
  if (joinStalled(now, warn_after)) {
    out << "\n  join() (waited " << static_cast<int>(std::chrono::duration<double>(now - join_since_).count())
        << " s): joined on ranks " << rankList(std::vector<int>(joined_.begin(), joined_.end()))
        << ", missing on ranks " << rankList(notJoined())
        << ", which neither joined nor submitted a collective since";
  }
  const auto waits = rankWaits();
  int detailed = 0;
  for (const auto& name : arrival_order_) {
    const auto& pending = table_.at(name);
    auto waited = std::chrono::duration<double>(now - pending.first_seen);
    if (waited < warn_after) continue;
    std::vector<int> ready, missing;
    for (int r = 0; r < size_; ++r) {
      if (pending.by_rank[r]) ready.push_back(r);
      else if (!joined_.count(r)) missing.push_back(r);
    }
    out << "\n  '" << name << "' (" << opTypeName(pending.by_rank[ready.front()]->op) << ", waited "
        << static_cast<int>(waited.count()) << " s): ready on ranks " << rankList(ready)
        << ", missing on ranks " << rankList(missing);
    if (detailed++ < kDetailed) out << rankLines(name, pending, waits);
  }
  if (out.str().empty()) return {};
  last_stall_report_ = now;
  return "these collectives have been waiting for other ranks:" + out.str() +
         "\nThe missing ranks have not submitted them: they may be stuck, have finished "
         "training early (use join() for uneven data), or submit different names or a "
         "different order of collectives.";
}

Response Coordinator::failure(const std::string& name, const Request& any, StatusKind kind,
                              const std::string& message, std::shared_ptr<const ErrorDetails> details) const {
  Response response;
  response.name = name;
  response.op = any.op;
  response.error = true;
  response.error_kind = kind;
  response.error_message = message;
  response.error_details = std::move(details);
  response.group = any.group;
  response.group_size = any.group_size;
  return response;
}

std::vector<Response> Coordinator::failStalled(Clock::time_point now,
                                               std::chrono::duration<double> fail_after) {
  std::vector<Response> failed;
  if (joinStalled(now, fail_after)) {
    Response join;
    join.op = OpType::kJoin;
    join.name = kJoinName;
    join.error = true;
    join.error_kind = StatusKind::kTimeout;
    join.error_message = "join() stalled for " + std::to_string(static_cast<int>(fail_after.count())) +
                         " s waiting for ranks " + rankList(notJoined()) +
                         ", which neither joined nor submitted a collective, and was failed "
                         "(HVDLITE_STALL_SHUTDOWN_TIME_SECONDS). Every rank of the process set must "
                         "call join() once it runs out of data.";
    auto details = std::make_shared<ErrorDetails>();
    details->tensor_names = {kJoinName};
    for (int r : notJoined()) {
      details->ranks.push_back(global_ranks_[r]);
      details->missing_ranks.push_back(global_ranks_[r]);
    }
    join.error_details = details;
    failed.push_back(join);
    joined_.clear();
  }
  // `waits` points into table_: nothing is erased until every message is
  // made. Made only when something is to fail (this runs every round trip).
  std::vector<RankWaits> waits;
  std::vector<std::string> keep, gone;
  for (const auto& name : arrival_order_) {
    auto it = table_.find(name);
    if (now - it->second.first_seen < fail_after) {
      keep.push_back(name);
      continue;
    }
    if (waits.empty()) waits = rankWaits();
    std::vector<int> missing;
    const Request* any = nullptr;
    auto details = std::make_shared<ErrorDetails>();
    details->tensor_names = {name};
    for (int r = 0; r < size_; ++r) {
      if (it->second.by_rank[r]) {
        any = &*it->second.by_rank[r];
        details->calls.push_back({global_ranks_[r], name, opTypeName(any->op), siteOf(*any), "", blocked_[r]});
      } else if (!joined_.count(r)) {
        missing.push_back(r);
        details->ranks.push_back(global_ranks_[r]);
        details->missing_ranks.push_back(global_ranks_[r]);
        addCalls(waits[r], *details);
      }
    }
    std::string message = std::string(opTypeName(any->op)) + " of '" + name + "' stalled for " +
                          std::to_string(static_cast<int>(fail_after.count())) + " s waiting for ranks " +
                          rankList(missing) + " and was failed (HVDLITE_STALL_SHUTDOWN_TIME_SECONDS)." +
                          rankLines(name, it->second, waits);
    failed.push_back(failure(name, *any, StatusKind::kTimeout, message, details));
    gone.push_back(name);
  }
  for (const auto& name : gone) table_.erase(name);
  arrival_order_ = std::move(keep);
  return failed;
}

// Note [Divergence]
// Ranks that stopped agreeing (one took another branch, skipped a step, or
// blocks on its collectives in another order) each wait on collectives that
// another rank never submits. The stall inspector would say so after its
// check time (60 s); this says it within seconds, and where each rank is:
// when every rank of the set waits on something (or has joined) and none
// of it was submitted by every rank, nothing can complete until some rank
// submits more. That is briefly true in healthy training too (ranks reach
// gradients in different orders), so it is reported once it has lasted
// HVDLITE_DIVERGENCE_CHECK_TIME_SECONDS, counted from when the last rank
// began to wait or the set last completed something (cached responses
// included: noteProgress), whichever is later.
// Ranks send what they waited on as cache bits in full after half that time
// (Note [Demoting to find divergence] in controller.cc), with how long they
// have waited, so the count starts when the waits did. A rank waiting on
// nothing is a late peer, never a divergence: the stall inspector's times
// apply. Where moreover every rank is blocked (a thread waits for a result
// in synchronize(), a blocking collective, join() or barrier(), or a TF/JAX
// op holds its step), no rank will submit anything more, so nothing can
// ever complete: after HVDLITE_DIVERGENCE_SHUTDOWN_TIME_SECONDS everything
// the set waits on fails on every rank with the report, instead of at the
// stall shutdown time. (Another thread of a blocked rank could still
// submit; a program whose ranks wait like that on purpose, longer than the
// shutdown time, sets it to 0.) Each process set is judged alone: a rank
// that waits only in another set looks idle here.
std::optional<Clock::time_point> Coordinator::divergentSince() const {
  if (size_ < 2 || table_.empty()) return std::nullopt;
  Clock::time_point since = last_response_;
  for (int r = 0; r < size_; ++r) {
    if (joined_.count(r)) {
      since = std::max(since, join_since_);
      continue;
    }
    std::optional<Clock::time_point> earliest;
    for (const auto& [name, pending] : table_) {
      if (pending.by_rank[r] && (!earliest || pending.arrived[r] < *earliest)) earliest = pending.arrived[r];
    }
    if (!earliest) return std::nullopt;  // waits on nothing: a late peer
    since = std::max(since, *earliest);
  }
  return since;
}

std::string Coordinator::divergenceReport(Clock::time_point now, std::chrono::duration<double> warn_after) {
  // A divergence starts no earlier than the last completion: most round
  // trips end here without looking at the table.
  if (now - last_response_ < warn_after) return {};
  auto since = divergentSince();
  if (!since || now - *since < warn_after || diverged_reported_ == since) return {};
  diverged_reported_ = since;
  return core::divergenceReport(rankWaits(), std::chrono::duration<double>(now - *since).count());
}

std::vector<Response> Coordinator::failDiverged(Clock::time_point now, std::chrono::duration<double> fail_after,
                                                const std::string& consequence) {
  if (now - last_response_ < fail_after) return {};
  auto since = divergentSince();
  if (!since || now - *since < fail_after) return {};
  const auto waits = rankWaits();
  for (const auto& rank : waits) {
    if (!rank.blocked) return {};
  }
  auto details = std::make_shared<ErrorDetails>();
  for (const auto& rank : waits) {
    details->ranks.push_back(rank.global_rank);
    addCalls(rank, *details);
  }
  for (const auto& name : arrival_order_) details->tensor_names.push_back(name);
  const std::string report =
      core::divergenceReport(waits, std::chrono::duration<double>(now - *since).count()) + "\n" + consequence;
  std::vector<Response> failed;
  for (const auto& name : arrival_order_) {
    const auto& pending = table_.at(name);
    const Request* any = nullptr;
    for (const auto& r : pending.by_rank) {
      if (r) any = &*r;
    }
    failed.push_back(failure(name, *any, StatusKind::kDivergence,
                             std::string(opTypeName(any->op)) + " of '" + name + "' failed: " + report, details));
  }
  // Members of a group whose other members diverged would wait forever.
  for (auto& [group, members] : held_groups_) {
    for (auto& member : members) {
      member.error = true;
      member.error_kind = StatusKind::kDivergence;
      member.error_message = std::string(opTypeName(member.op)) + " of '" + member.name + "' failed: " + report;
      member.error_details = details;
      failed.push_back(std::move(member));
    }
  }
  held_groups_.clear();
  if (!joined_.empty()) {
    Response join;
    join.op = OpType::kJoin;
    join.name = kJoinName;
    join.error = true;
    join.error_kind = StatusKind::kDivergence;
    join.error_message = "join() failed: " + report;
    join.error_details = details;
    failed.push_back(join);
    joined_.clear();
  }
  table_.clear();
  arrival_order_.clear();
  diverged_reported_.reset();
  return failed;
}

}  // namespace hvdlite::core
