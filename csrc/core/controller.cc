#include "core/controller.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "common/errors.h"
#include "common/logging.h"
#include "core/collective_math.h"
#include "core/fusion.h"

namespace hvdlite::core {
namespace {

// Flags travel inverted through the bitwise-AND allreduce, which makes the
// AND of inverted bits the OR of the flags: "does ANY rank ...".
constexpr uint64_t kHasUncached = 1;  // some rank has requests for the coordinator
constexpr uint64_t kShutdown = 2;     // some rank is shutting down
constexpr uint64_t kJoined = 4;       // some rank has joined
constexpr uint64_t kParameters = 8;   // rank 0 broadcasts new parameters this cycle

// Note [Demoting to find divergence]
// A request that hits the response cache travels as one bit, so the
// coordinator never learns that a rank waits on it. A rank that has waited
// on one for half the stall check time, or half the divergence check time
// if that is shorter, sends it in full (with its call site and how long it
// has waited), so that the coordinator can name the missing ranks and see
// what each rank waits on (Note [Divergence] in coordinator.cc). The others
// then drop the slot and negotiate that name in full once more: a cost paid
// only by a wait that has already lasted seconds.
constexpr double kDemoteFraction = 0.5;

// Between the reports of one round trip's note (no report contains it).
constexpr char kReportSeparator = '\x1e';

// The shorter of the enabled check times (0 = both off).
std::chrono::duration<double> demoteAfter(const ControllerOptions& options) {
  auto stall = options.stall_warning, divergence = options.divergence_warning;
  if (stall.count() <= 0) return divergence * kDemoteFraction;
  if (divergence.count() <= 0) return stall * kDemoteFraction;
  return std::min(stall, divergence) * kDemoteFraction;
}

// Not while a rank has joined: it holds no request to cache (Note [Join]).
bool cacheable(const Response& r, bool any_joined) {
  if (r.error || any_joined) return false;
  switch (r.op) {
    case OpType::kAllreduce:
    case OpType::kAllgather:
    case OpType::kBroadcast:
    case OpType::kAlltoall:
    case OpType::kReducescatter:
      return true;
    default:
      return false;
  }
}

// Note [Corrupt requests for tests]
// HVDLITE_TEST_CORRUPT_REQUESTS makes a rank other than 0 send every
// non-empty request list malformed, so that a job of real processes shows
// what a bad peer gets (tests/common/test_peer_messages.py): the coordinator
// fails the job, naming that rank (Note [Checked peer messages] in
// message.cc). "count": the list claims 2^32 - 1 requests; "rank": each
// request claims the next rank; "shape": each shape's size overflows 64 bits.
std::string corruptForTest(const std::string& how, std::vector<Request> mine, const RankState& state, int size) {
  if (how == "rank") {
    for (auto& r : mine) r.rank = (r.rank + 1) % size;
  } else if (how == "shape") {
    for (auto& r : mine) r.shape = {INT64_MAX / 2, 4};
  }
  std::string bytes = serializeRequests(mine, state);
  if (how == "count") {
    const uint32_t huge = UINT32_MAX;
    std::memcpy(bytes.data(), &huge, sizeof(huge));
  }
  return bytes;
}

// Each of `text`'s "<length>:<bytes>" items, in order (the shutdown
// exchange); `sender`, the global rank that wrote them, is named when they
// are malformed.
std::vector<std::string> shutdownItems(const std::string& text, int sender) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t colon = text.find(':', pos);
    const std::string digits = colon == std::string::npos ? std::string() : text.substr(pos, colon - pos);
    // At most 9 digits: a length below 10^9, within the frame limit.
    const bool number = !digits.empty() && digits.size() <= 9 &&
                        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    const size_t length = number ? std::stoul(digits) : 0;
    if (!number || length > text.size() - colon - 1) {
      throwBadPeerMessage(sender, detail::concat("sent a malformed shutdown message: no item of a length that fits "
                                                 "at byte ", pos, " of ", text.size()));
    }
    out.push_back(text.substr(colon + 1, length));
    pos = colon + 1 + length;
  }
  return out;
}

}  // namespace

// Word 0: inverted flags. Then `words` words of ready bits (AND: ready on
// every rank), then `words` words of inverted invalid bits (OR: some rank
// found the slot stale), then `lane_words` of lanes (all ones unless carried:
// Note [One exchange for a cached small allreduce] in cached_exchange.cc).
// Its words live in the controller's storage, reused from cycle to cycle.
struct Controller::Exchange {
  Exchange(size_t capacity, size_t lane_words, std::vector<uint64_t>& storage)
      : words((capacity + 63) / 64), data(storage) {
    // Filled in place (the size rarely changes): vector::assign's call and
    // loop cost as much as the few words themselves.
    const size_t size = 1 + 2 * words + lane_words;
    if (data.size() != size) data.resize(size);
    std::fill(data.begin(), data.end(), ~uint64_t{0});
    std::fill_n(data.begin() + 1, words, uint64_t{0});
  }
  ExchangeLanes lanes(int size) const { return ExchangeLanes(data.data() + 1 + 2 * words, size); }
  void setFlag(uint64_t flag) { data[0] &= ~flag; }
  bool flag(uint64_t f) const { return (~data[0] & f) != 0; }
  void setReady(size_t slot) { data[1 + slot / 64] |= uint64_t{1} << (slot % 64); }
  bool ready(size_t slot) const { return (data[1 + slot / 64] >> (slot % 64)) & 1; }
  void setInvalid(size_t slot) { data[1 + words + slot / 64] &= ~(uint64_t{1} << (slot % 64)); }
  bool invalid(size_t slot) const { return !((data[1 + words + slot / 64] >> (slot % 64)) & 1); }
  // Calls visit(slot, invalid) for each slot below `capacity` that is ready
  // or invalid, in increasing order (invalid wins over ready).
  template <typename Visit>
  void forEachMarked(size_t capacity, Visit visit) const {
    for (size_t w = 0; w < words; ++w) {
      uint64_t invalid_bits = ~data[1 + words + w];
      uint64_t marked = data[1 + w] | invalid_bits;
      while (marked != 0) {
        const int bit = __builtin_ctzll(marked);
        marked &= marked - 1;
        const size_t slot = w * 64 + static_cast<size_t>(bit);
        if (slot >= capacity) return;
        visit(slot, ((invalid_bits >> bit) & 1) != 0);
      }
    }
  }

  size_t words;
  std::vector<uint64_t>& data;
};

Controller::Controller(int32_t process_set_id, transport::Communicator& comm,
                       const ControllerOptions& options, Timeline& timeline)
    : process_set_id_(process_set_id),
      comm_(comm),
      options_(options),
      timeline_(timeline),
      cache_(options.cache_capacity),
      lane_words_(options.cache_capacity > 0 ? ExchangeLanes::wordsFor(comm.size()) : 0) {
  if (comm_.rank() == 0) {
    std::vector<int> global;
    for (int r = 0; r < comm_.size(); ++r) global.push_back(comm_.globalRank(r));
    coordinator_ = std::make_unique<Coordinator>(std::move(global), options.join_average_active);
  }
}

CycleOutcome& Controller::negotiate(TensorQueue& queue, bool want_shutdown,
                                   const std::string& parameters, Clock::time_point now) {
  admit(queue, now);

  // Note [Cache bits as far as used]
  // The bit vectors cover the slots filled so far, not the cache's capacity
  // (1024 by default): a job that reuses a few tensors exchanges 3 words
  // instead of 33, one cache line between shared-memory ranks instead of five,
  // on every cycle (the 4-byte allreduce's negotiation). The count is the same
  // on every rank because the slots are (Note [Cache bits]).
  Exchange bits(cache_.slotsInUse(), lane_words_, exchange_words_);
  Hits hits;
  std::vector<Request> mine = collectBits(bits, any_joined_, now, hits);
  if (lane_words_ > 0) carry(bits, mine, hits);
  RankState state;
  state.blocked = queue.blocked();
  if (!mine.empty()) bits.setFlag(kHasUncached);
  if (want_shutdown) bits.setFlag(kShutdown);
  if (joined_) bits.setFlag(kJoined);
  if (comm_.rank() == 0 && !parameters.empty()) bits.setFlag(kParameters);
  // The coordinator forces a full round now and then while it holds requests,
  // so that stalls are detected and reported.
  bool coordinator_due = coordinator_ && now - last_coordinator_check_ > std::chrono::seconds(1);
  if (coordinator_due) bits.setFlag(kHasUncached);
  if (!invalidate_next_.empty()) {
    for (size_t slot : invalidate_next_) bits.setInvalid(slot);
    invalidate_next_.clear();
  }

  comm_.allreduce(bits.data.data(), bits.data.size() * sizeof(uint64_t), DataType::kUInt8,
                  ReduceOp::kBitAnd);

  // Reused from cycle to cycle, so that its responses keep their storage.
  CycleOutcome& outcome = outcome_;
  outcome.shutdown = bits.flag(kShutdown);
  // Not rebuilt empty every cycle: the report is there only in the one that shuts down.
  if (outcome.shutdown) {
    outcome.shutdown_report = exchangeShutdown(queue, want_shutdown);
  } else if (!outcome.shutdown_report.requested.empty() || !outcome.shutdown_report.waiting.empty()) {
    outcome.shutdown_report = ShutdownReport();
  }
  any_joined_ = bits.flag(kJoined);
  outcome.parameters.clear();
  if (bits.flag(kParameters)) {
    if (comm_.rank() == 0) outcome.parameters = parameters;
    comm_.broadcastMessage(outcome.parameters, 0);
  }
  takeCached(bits, outcome.responses);
  const size_t cached = outcome.responses.size();
  if (lane_words_ > 0 && cached == 1) reduceCarried(bits, outcome.responses.front());
  if (coordinator_ && cached > 0) coordinator_->noteProgress(now);
  if (bits.flag(kHasUncached)) {
    if (coordinator_) last_coordinator_check_ = now;
    for (auto& r : mine) pending_.at(r.name).sent_full = true;
    auto fresh = roundTrip(mine, any_joined_, state);
    remember(fresh);
    outcome.responses.insert(outcome.responses.end(), fresh.begin(), fresh.end());
    outcome_stamps_.resize(outcome.responses.size(), 0);  // not copies of cached ones
  }
  for (const auto& r : outcome.responses) timeline_.negotiateEnd(r.name);
  // Idle cycles say nothing: one line per cycle that decided something.
  if (!mine.empty() || !outcome.responses.empty()) {
    HVD_LOG(kDebug, comm_.globalRank(comm_.rank()), "process set ", process_set_id_, " cycle: ", cached,
            " cache hit(s), ", mine.size(), " request(s) sent in full (cache misses, or waiting too long), ",
            outcome.responses.size() - cached, " response(s) from the coordinator, ", pending_.size(),
            " still waiting for other ranks");
  }
  if (logEnabled(LogLevel::kTrace) && !outcome.responses.empty()) traceResponses(outcome.responses, cached);
  return outcome;
}

void Controller::traceResponses(const std::vector<Response>& responses, size_t cached) const {
  std::string text;
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    text += detail::concat("\n  ", opTypeName(r.op), " '", r.name, "' ", dtypeName(r.dtype), " ",
                           shapeString(r.shape), i < cached ? " (cached)" : "");
    if (r.error) text += " error: " + r.error_message;
  }
  log(LogLevel::kTrace, comm_.globalRank(comm_.rank()),
      detail::concat("process set ", process_set_id_, " cycle: ", responses.size(), " response(s):", text));
}

// Note [Naming who shut down]
// A rank that shuts down (shutdown(), or its process exiting) while others
// wait for a collective it never submitted ends their wait: they must be
// told which rank never submitted it, not only that the job was shut down.
// Every member sees the shutdown flag in the same cycle, so they can afford
// one more round trip, once per runtime: each sends whether it asked to shut
// down and the names it still waits on; rank 0 sends all of it back. An
// entry submitted after this exchange is compared with the others' lists
// too; a rank that submits its part after it is reported as lacking it: at
// the shutdown, it was.
ShutdownReport Controller::exchangeShutdown(TensorQueue& queue, bool want_shutdown) {
  // What was submitted while this cycle waited for the others counts too:
  // a rank blocked in the flags' allreduce may have just submitted its part.
  admit(queue, Clock::now());
  std::string mine = want_shutdown ? "1" : "0";
  for (const auto& [name, p] : pending_) mine += std::to_string(name.size()) + ":" + name;
  auto gathered = comm_.gather(mine, 0);
  std::string all;
  for (const auto& part : gathered) all += std::to_string(part.size()) + ":" + part;
  comm_.broadcastMessage(all, 0);
  ShutdownReport report;
  const int coordinator = comm_.globalRank(0);
  auto parts = shutdownItems(all, coordinator);
  if (static_cast<int>(parts.size()) != comm_.size()) {
    throwBadPeerMessage(coordinator, detail::concat("sent a shutdown message of ", parts.size(), " parts for a set of ",
                                                    comm_.size(), " ranks"));
  }
  for (size_t r = 0; r < parts.size(); ++r) {
    const int global = comm_.globalRank(static_cast<int>(r));
    if (parts[r].empty()) throwBadPeerMessage(global, "sent an empty shutdown message");
    if (parts[r][0] == '1') report.requested.push_back(global);
    auto names = shutdownItems(parts[r].substr(1), global);
    report.waiting[global] = std::set<std::string>(names.begin(), names.end());
  }
  return report;
}

// Note [Pending requests hashed]
// Every tensor of a step is looked up here by name three times: admitted
// (the insert), when its cached response comes (takeCached, the retire) and
// when a fresh one does (remember). A search tree of a step's 200 names,
// which share long prefixes ("step.17", "allreduce.noname.123"), cost
// string comparisons and rebalancing at each, so the pending requests are
// hashed (admit 910 -> 720 instructions a tensor, takeCached 890 -> 835;
// 200 x 16 KiB step, rank 0 of 2, callgrind), as
// the queue's in-flight entries are (Note [In-flight entries hashed] in
// tensor_queue.cc). What the tree's order gave is kept where it is seen:
// collectBits sorts the requests it sends in full by name (and a group's
// members), so the coordinator receives them, and reports stalls and
// failures, in the order it did; the shutdown exchange's names become a set
// on arrival. The steady state of a training loop sends nothing in full:
// the sort costs nothing there.

// Turns this set's newly submitted entries into pending requests.
void Controller::admit(TensorQueue& queue, Clock::time_point now) {
  queue.popNew(process_set_id_, admitted_);
  for (const TensorEntry* e : admitted_) {
    // Built in place, in a kept node: every gradient of every step comes
    // through here (Note [Map nodes kept for reuse]).
    // A name still pending (resubmitted) keeps its request, rewritten here.
    auto it = pending_nodes_.insertUnique(pending_, e->name).first;
    describe(it->second, *e, now);
    if (e->op == OpType::kJoin) joined_ = true;
  }
}

// Note [One request description]
// A request's fields are copied twice on the way in: api.h's hvdlite_request
// (a C struct of pointers into the caller's memory, valid only during the
// call) into the TensorEntry the queue owns, and the entry's negotiated
// fields into the Request the controller keeps pending here. The second copy
// stays, measured: with kept nodes (the name's and the shape's buffers
// reused) its string and vector assignments cost about 200 instructions a
// tensor, 1 % of the ~20,000 a tensor costs a rank in a step of 200 x 16 KiB
// at 2 ranks, memory copies aside (callgrind, bench/RESULTS.md 2026-11-28),
// while a pending request pointing into its entry would tie the
// controller to the queue's lifetimes: the executor takes entries, and
// drains remove them, while their requests may still be pending or cached.
void Controller::describe(PendingRequest& p, const TensorEntry& e, Clock::time_point now) const {
  p.sent_full = false;
  p.since = now;
  p.call_site = e.call_site;
  // Every field of Request, assigned (not a new Request: the buffers stay).
  Request& r = p.request;
  r.rank = comm_.rank();
  r.op = e.op;
  r.reduce_op = e.reduce_op;
  r.dtype = e.dtype;
  if (r.name != e.name) r.name = e.name;  // a kept node often held this very name
  r.root_rank = e.root_rank;
  r.prescale = e.prescale;
  r.postscale = e.postscale;
  r.shape = e.shape;
  r.splits = e.splits;
  r.device = e.device;
  r.group = e.group;
  r.group_size = e.group_size;
  if (e.op == OpType::kAddProcessSet) {
    r.process_set_ranks = e.process_set_ranks;
  } else {
    r.process_set_ranks.clear();
  }
  r.process_set_id = e.op == OpType::kRemoveProcessSet ? e.removed_process_set_id : Request().process_set_id;
  r.call_site.reset();
  r.waited_ms = 0;
  // Copied now, while the entry is surely the queue's: by the cycle that
  // carries it, a process set's removal may have drained it.
  carryIfSmall(e, p.carried);
}

// Sets this rank's cache bits; returns the requests that must go in full.
// Note [Cached groups]: the members of a group go by cache bits only all
// together: every member is here and every one is a hit. Otherwise, all go in
// full to the coordinator, which holds a group until it is complete; a
// group still missing members waits here, unless it has waited long enough
// to be reported as stalled. Every rank sets all of a group's bits or none,
// so the AND of the bits can only hold whole groups (takeCached checks it
// anyway: a slot invalidated in the same cycle removes one member).
Request Controller::fullRequest(const PendingRequest& pending, Clock::time_point now) const {
  Request r = pending.request;
  // Interned for the life of the process: pointed at, not owned.
  if (pending.call_site) r.call_site = std::shared_ptr<const CallSite>(std::shared_ptr<const CallSite>(), pending.call_site);
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - pending.since).count();
  r.waited_ms = static_cast<uint32_t>(std::clamp<int64_t>(waited, 0, UINT32_MAX));
  return r;
}

std::vector<Request> Controller::collectBits(Exchange& bits, bool any_joined, Clock::time_point now, Hits& hits) {
  std::vector<Request> full;
  const auto demote_after = demoteAfter(options_);
  const bool demoting = demote_after.count() > 0;
  struct Member {
    const PendingRequest* pending;
    const Request* request;
    ResponseCache::Match match;
    size_t slot;
    bool stalled;
  };
  std::map<std::string, std::vector<Member>> groups;
  // Unordered (Note [Pending requests hashed]): sorted below.
  for (auto& [name, p] : pending_) {
    if (p.sent_full) continue;
    const Request& r = p.request;
    // Joins, barriers and process-set changes always go to the coordinator.
    bool always_full = r.op == OpType::kJoin || r.op == OpType::kBarrier ||
                       r.op == OpType::kAddProcessSet || r.op == OpType::kRemoveProcessSet;
    size_t slot = 0;
    auto match = always_full ? ResponseCache::Match::kMiss : cache_.lookup(r, &slot);
    bool stalled = demoting && now - p.since > demote_after;
    if (stalled && match == ResponseCache::Match::kHit) {
      HVD_LOG(kDebug, comm_.globalRank(comm_.rank()), "stall: '", name, "' has waited ",
              std::chrono::duration<double>(now - p.since).count(),
              " s in the response cache; sending it in full so that the coordinator can name the "
              "missing ranks and see what each rank waits on");
    }
    if (!r.group.empty()) {
      groups[r.group].push_back(Member{&p, &r, match, slot, stalled});
      continue;
    }
    if (match == ResponseCache::Match::kHit && !any_joined && !stalled) {
      bits.setReady(slot);
      hits = Hits{hits.count + 1, &p, slot};
      continue;
    }
    if (match == ResponseCache::Match::kStale) bits.setInvalid(slot);
    full.push_back(fullRequest(p, now));
  }
  auto by_name = [](const Request& a, const Request& b) { return a.name < b.name; };
  std::sort(full.begin(), full.end(), by_name);
  for (auto& [group, members] : groups) {
    std::sort(members.begin(), members.end(),
              [](const Member& a, const Member& b) { return a.request->name < b.request->name; });
  }
  for (const auto& [group, members] : groups) {
    bool complete = static_cast<int32_t>(members.size()) >= members.front().request->group_size;
    bool stalled = std::any_of(members.begin(), members.end(), [](const Member& m) { return m.stalled; });
    if (!complete && !stalled) continue;
    bool all_hit = complete && !any_joined && !stalled &&
                   std::all_of(members.begin(), members.end(), [](const Member& m) {
                     return m.match == ResponseCache::Match::kHit;
                   });
    for (const auto& m : members) {
      if (all_hit) {
        bits.setReady(m.slot);
        hits = Hits{hits.count + 1, m.pending, m.slot};
        continue;
      }
      if (m.match == ResponseCache::Match::kStale) bits.setInvalid(m.slot);
      full.push_back(fullRequest(*m.pending, now));
    }
  }
  return full;
}

// Note [Cached responses copied once]
// A cycle's outcome holds copies of its cached responses: the executor runs
// them after this cycle's remember() may have evicted their slots, and the
// lone small allreduce's copy carries the data reduced in negotiation. A
// loop that reduces the same tensor again and again used to copy the same
// response into the same place of the outcome every cycle (~200 instructions
// of a 4-byte allreduce_: its strings and vectors, callgrind). So each place
// remembers the stamp of the slot it was copied from (ResponseCache::stamp:
// new with every put, so an evicted, refilled or renegotiated slot never
// matches) and a place that already holds that copy is kept; only the data
// a previous cycle reduced into it is dropped. A place that held a fresh
// response from the coordinator has stamp 0, and is copied into.
void Controller::putCached(std::vector<Response>& out, size_t n, size_t slot) {
  const uint64_t stamp = cache_.stamp(slot);
  if (n >= out.size()) {
    outcome_stamps_.resize(n);
    out.push_back(cache_.response(slot));
    outcome_stamps_.push_back(stamp);
    return;
  }
  if (outcome_stamps_[n] == stamp) {
    out[n].reduced_in_negotiation.clear();
    return;
  }
  // Into the storage (name, shape) of the response that was there: no
  // allocation in a cycle like the last one. Unstamped while it is copied,
  // in case the copy throws half way.
  outcome_stamps_[n] = 0;
  out[n] = cache_.response(slot);
  outcome_stamps_[n] = stamp;
}

void Controller::takeCached(const Exchange& bits, std::vector<Response>& out) {
  size_t n = 0;
  std::map<std::string, std::vector<size_t>> groups;  // group -> its ready slots
  // Only the set bits, a word at a time: a cycle usually marks a few slots
  // of a cache of thousands, and this runs on every collective's latency path.
  bits.forEachMarked(cache_.capacity(), [&](size_t slot, bool invalid) {
    if (invalid) {
      cache_.erase(slot);
      return;
    }
    const Response& r = cache_.response(slot);
    if (!r.group.empty()) {
      groups[r.group].push_back(slot);
      return;
    }
    cache_.touch(slot);
    retire(pending_.find(r.name));
    putCached(out, n++, slot);
  });
  // A group's members side by side, so that they fuse together.
  for (const auto& [group, slots] : groups) {
    if (static_cast<int32_t>(slots.size()) < cache_.response(slots.front()).group_size) continue;
    for (size_t slot : slots) {
      cache_.touch(slot);
      retire(pending_.find(cache_.response(slot).name));
      putCached(out, n++, slot);
    }
  }
  out.resize(n);
  outcome_stamps_.resize(n);
}

// Note [One exchange for a cached small allreduce] in cached_exchange.cc:
// only a lone hit whose data fits, with nothing sent in full (a rank that
// has joined sends its join in full, or sets no hit).
void Controller::carry(Exchange& bits, const std::vector<Request>& mine, const Hits& hits) {
  if (hits.count != 1 || !mine.empty() || joined_ || hits.last->carried.bytes == 0) return;
  if (hits.last_slot > 0xffffffffu) return;  // the lane's header holds 32 bits of slot
  bits.lanes(comm_.size()).carry(comm_.rank(), hits.last_slot, hits.last->carried);
}

// `response` is the cycle's only cached one. Every rank decides from the
// same exchanged words, so all of them reduce here or none does.
void Controller::reduceCarried(const Exchange& bits, Response& response) const {
  size_t bytes = 0;
  const ExchangeLanes lanes = bits.lanes(comm_.size());
  const auto slot = lanes.agreedSlot(&bytes);
  if (!slot || *slot >= cache_.slotsInUse() || !bits.ready(*slot) || bits.invalid(*slot)) return;
  // Then the cycle's one cached response is that slot's, which every rank
  // holds alike; each carrier checked its entry against the same fields.
  if (response.op != OpType::kAllreduce || response.reduce_op == ReduceOp::kAdasum || response.device >= 0 ||
      !response.group.empty() || responseBytes(response) != static_cast<int64_t>(bytes)) {
    return;
  }
  lanes.reduce(response, bytes, response.reduced_in_negotiation);
}

// Note [Stall reports on every rank]
// Only the coordinator knows which ranks are missing, but a user may look at
// any rank's log, and the rank that is stuck is often not rank 0. So the
// coordinator sends its stall report with the responses of the round trip
// (forced every second while it holds requests, so a report waits at most
// that long), and every member logs it under its own rank.
std::vector<Response> Controller::roundTrip(const std::vector<Request>& mine, bool any_joined,
                                            const RankState& state) {
  std::string sent = serializeRequests(mine, state);
  if (!options_.test_corrupt_requests.empty() && !mine.empty() && comm_.rank() != 0) {
    sent = corruptForTest(options_.test_corrupt_requests, mine, state, comm_.size());
  }
  auto gathered = comm_.gather(sent, 0);
  std::string message;
  if (coordinator_) {
    std::string report;
    auto responses = coordinate(gathered, any_joined, &report);
    message = serializeResponses(responses, report);
  }
  comm_.broadcastMessage(message, 0);
  std::string report;
  const int coordinator = comm_.globalRank(0);
  auto responses = parseResponses(message, &report, coordinator);
  for (const auto& response : responses) {
    const std::string problem = checkResponse(response, comm_.size());
    if (problem.empty()) continue;
    throwBadPeerMessage(coordinator, detail::concat("(the coordinator of process set ", process_set_id_,
                                                    ") sent a response for ", problem));
  }
  // One warning per report (a stall's, a divergence's), each with its own time.
  size_t begin = 0;
  while (begin < report.size()) {
    size_t end = report.find(kReportSeparator, begin);
    if (end == std::string::npos) end = report.size();
    logWarning(comm_.globalRank(comm_.rank()), report.substr(begin, end - begin));
    begin = end + 1;
  }
  return responses;
}

std::vector<Response> Controller::coordinate(const std::vector<std::string>& gathered, bool any_joined,
                                             std::string* report) {
  auto now = Clock::now();
  HVD_CHECK(static_cast<int>(gathered.size()) == comm_.size(), "gathered ", gathered.size(), " request lists from ",
            comm_.size(), " ranks");
  for (size_t rank = 0; rank < gathered.size(); ++rank) {
    RankState state;
    // Each list is tied to the rank whose connection it came on: a request
    // claiming another rank is refused (Coordinator::add).
    auto requests = parseRequests(gathered[rank], &state, comm_.globalRank(static_cast<int>(rank)));
    coordinator_->setRankState(static_cast<int>(rank), state);
    for (const auto& r : requests) {
      // A full request for a cached name comes from a rank that demoted it
      // (stall); the others must stop waiting on the slot and send theirs.
      auto slot = cache_.slotOf(r.name);
      if (slot && !any_joined) invalidate_next_.insert(*slot);
    }
    coordinator_->add(static_cast<int>(rank), requests, now);
  }
  auto responses = coordinator_->takeReady();
  auto note = [report](const std::string& text) {
    if (!report->empty()) *report += kReportSeparator;
    *report += text;
  };
  if (options_.stall_warning.count() > 0) {
    auto stall = coordinator_->stallReport(now, options_.stall_warning);
    if (!stall.empty()) note(stallMessage(stall));
  }
  if (options_.divergence_warning.count() > 0) {
    auto divergence = coordinator_->divergenceReport(now, options_.divergence_warning);
    if (!divergence.empty()) note(divergenceMessage(divergence));
  }
  if (options_.divergence_shutdown.count() > 0) {
    auto failed = coordinator_->failDiverged(now, options_.divergence_shutdown, divergenceConsequence());
    responses.insert(responses.end(), failed.begin(), failed.end());
  }
  if (options_.stall_shutdown.count() > 0) {
    auto failed = coordinator_->failStalled(now, options_.stall_shutdown);
    responses.insert(responses.end(), failed.begin(), failed.end());
  }
  return responses;
}

// " (process set N)" after a report's kind, nothing for the global set.
std::string Controller::whichSet() const {
  return process_set_id_ == 0 ? std::string() : " (process set " + std::to_string(process_set_id_) + ")";
}

std::string Controller::stallMessage(const std::string& report) const {
  std::string next =
      options_.stall_shutdown.count() > 0
          ? "\nhvdlite fails them with this reason once they have waited " +
                std::to_string(static_cast<int>(options_.stall_shutdown.count())) +
                " s (HVDLITE_STALL_SHUTDOWN_TIME_SECONDS; 0 waits forever)."
          : std::string("\nHVDLITE_STALL_SHUTDOWN_TIME_SECONDS=0: they wait forever.");
  return "stall" + whichSet() + ": " + report + next;
}

std::string Controller::divergenceMessage(const std::string& report) const {
  std::string next =
      options_.divergence_shutdown.count() > 0
          ? "\nhvdlite fails them on every rank once every rank is blocked waiting and this has lasted " +
                std::to_string(static_cast<int>(options_.divergence_shutdown.count())) +
                " s (HVDLITE_DIVERGENCE_SHUTDOWN_TIME_SECONDS); until then a rank may still submit "
                "what the others wait on."
          : std::string("\nHVDLITE_DIVERGENCE_SHUTDOWN_TIME_SECONDS=0: they wait until the stall shutdown.");
  return "divergence" + whichSet() + ": " + report + next;
}

std::string Controller::divergenceConsequence() const {
  return "Every rank is blocked waiting, so none of them can ever complete: hvdlite failed them "
         "after " + std::to_string(static_cast<int>(options_.divergence_shutdown.count())) +
         " s (HVDLITE_DIVERGENCE_SHUTDOWN_TIME_SECONDS) instead of waiting for the stall shutdown.";
}

// Caches fresh responses (identically on every rank) and retires their requests.
void Controller::remember(const std::vector<Response>& responses) {
  for (const auto& r : responses) {
    auto it = pending_.find(r.name);
    if (cacheable(r, any_joined_) && it != pending_.end()) cache_.put(r, it->second.request);
    if (r.op == OpType::kJoin) joined_ = false;
    retire(it);
  }
}

void Controller::retire(PendingMap::iterator it) {
  if (it != pending_.end()) pending_nodes_.keep(pending_nodes_.extract(pending_, it));
}

}  // namespace hvdlite::core
