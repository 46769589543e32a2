// Unit tests of negotiation's pieces: messages, the coordinator's validation,
// the response cache and the fusion planner.
#include <cstring>

#include "common/errors.h"
#include "core/coordinator.h"
#include "core/fusion.h"
#include "core/message.h"
#include "core/response_cache.h"
#include "testing.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

Request allreduceRequest(int rank, const std::string& name, std::vector<int64_t> shape,
                         DataType dtype = DataType::kFloat32) {
  Request r;
  r.rank = rank;
  r.name = name;
  r.op = OpType::kAllreduce;
  r.dtype = dtype;
  r.shape = std::move(shape);
  return r;
}

// Adds each request as sent by its own rank (Coordinator::add takes one
// rank's list, from that rank's connection).
void addAll(Coordinator& c, const std::vector<Request>& requests, Clock::time_point now) {
  for (const auto& r : requests) c.add(r.rank, {r}, now);
}

}  // namespace

TEST(RequestsSurviveSerialization) {
  Request r = allreduceRequest(2, "grad/w", {3, 4});
  r.splits = {1, 2};
  r.prescale = 0.5;
  r.group = "g";
  r.group_size = 3;
  auto back = parseRequests(serializeRequests({r, r}));
  CHECK_EQ(back.size(), size_t{2});
  CHECK(back[1].sameParameters(r));
  CHECK_EQ(back[1].rank, 2);
}

TEST(ResponsesSurviveSerialization) {
  Response r;
  r.name = "x";
  r.op = OpType::kAlltoall;
  r.per_rank = {1, 2, 3, 4};
  r.error = true;
  r.error_kind = StatusKind::kPrecondition;
  r.error_message = "boom";
  Response ok;
  auto back = parseResponses(serializeResponses({r, ok}));
  CHECK_EQ(back[0].per_rank.size(), size_t{4});
  CHECK_EQ(back[0].error_message, std::string("boom"));
  CHECK(back[0].error_kind == StatusKind::kPrecondition);
  CHECK(!back[1].error);
}

TEST(TruncatedMessageIsAnError) {
  auto bytes = serializeRequests({allreduceRequest(0, "x", {2})});
  CHECK_THROWS(parseRequests(bytes.substr(0, bytes.size() - 3)), Error, "cut short");
}

namespace {

Request processSetRequest(int rank, OpType op) {
  Request r;
  r.rank = rank;
  r.op = op;
  r.name = op == OpType::kAddProcessSet ? "__add_process_set" : "__remove_process_set";
  return r;
}

}  // namespace

TEST(ProcessSetFieldsSurviveSerialization) {
  Request add = processSetRequest(1, OpType::kAddProcessSet);
  add.process_set_ranks = {0, 2, 5};
  Request remove = processSetRequest(1, OpType::kRemoveProcessSet);
  remove.process_set_id = 3;
  auto requests = parseRequests(serializeRequests({add, remove}));
  CHECK(requests[0].process_set_ranks == add.process_set_ranks);
  CHECK(requests[0].shape.empty());
  CHECK_EQ(requests[1].process_set_id, 3);
  CHECK(!requests[0].sameParameters(requests[1]));
  Request other_ranks = add;
  other_ranks.process_set_ranks = {0, 2};
  CHECK(!add.sameParameters(other_ranks));

  Response r;
  r.op = OpType::kAddProcessSet;
  r.process_set_ranks = {1, 4};
  r.process_set_id = 7;
  auto back = parseResponses(serializeResponses({r}));
  CHECK(back[0].process_set_ranks == r.process_set_ranks);
  CHECK_EQ(back[0].process_set_id, 7);
  CHECK(back[0].per_rank.empty());
}

TEST(CoordinatorAnswersProcessSetChangesInTheirOwnFields) {
  Coordinator c({0, 1, 2});
  std::vector<Request> adds, removes;
  for (int rank = 0; rank < 3; ++rank) {
    adds.push_back(processSetRequest(rank, OpType::kAddProcessSet));
    adds.back().process_set_ranks = {0, 2};
    removes.push_back(processSetRequest(rank, OpType::kRemoveProcessSet));
    removes.back().process_set_id = 4;
    removes.back().root_rank = rank;  // not the set id: must not be compared
  }
  addAll(c, adds, Clock::now());
  addAll(c, removes, Clock::now());
  auto ready = c.takeReady();
  CHECK_EQ(ready.size(), size_t{2});
  for (const auto& r : ready) {
    CHECK(!r.error);
    if (r.op == OpType::kAddProcessSet) {
      CHECK(r.process_set_ranks == (std::vector<int64_t>{0, 2}));
      CHECK(r.per_rank.empty());
    } else {
      CHECK_EQ(r.process_set_id, 4);
      CHECK_EQ(r.value, 0);
    }
  }
}

TEST(CoordinatorNamesMismatchedProcessSetFields) {
  Coordinator c({0, 1});
  Request add0 = processSetRequest(0, OpType::kAddProcessSet), add1 = add0;
  add0.process_set_ranks = {0, 1};
  add1.rank = 1;
  add1.process_set_ranks = {1};
  Request remove0 = processSetRequest(0, OpType::kRemoveProcessSet), remove1 = remove0;
  remove0.process_set_id = 2;
  remove1.rank = 1;
  remove1.process_set_id = 3;
  addAll(c, {add0, remove0}, Clock::now());
  addAll(c, {add1, remove1}, Clock::now());
  auto ready = c.takeReady();
  CHECK_EQ(ready.size(), size_t{2});
  for (const auto& r : ready) {
    CHECK(r.error);
    const auto& m = r.error_message;
    if (r.op == OpType::kAddProcessSet) {
      CHECK(m.find("mismatched process set ranks") != std::string::npos);
      CHECK(m.find("rank 1 has [1]") != std::string::npos);
    } else {
      CHECK(m.find("mismatched process set id") != std::string::npos);
      CHECK(m.find("rank 0 has 2, rank 1 has 3") != std::string::npos);
    }
  }
}

TEST(CoordinatorWaitsForEveryRank) {
  Coordinator c({0, 1, 2});
  auto now = Clock::now();
  addAll(c, {allreduceRequest(0, "x", {2})}, now);
  addAll(c, {allreduceRequest(2, "x", {2})}, now);
  CHECK(c.takeReady().empty());
  addAll(c, {allreduceRequest(1, "x", {2})}, now);
  auto ready = c.takeReady();
  CHECK_EQ(ready.size(), size_t{1});
  CHECK(!ready[0].error);
  CHECK_EQ(ready[0].average_ranks, 3);
}

TEST(CoordinatorNamesTheMismatchedFieldAndEveryRanksValue) {
  Coordinator c({0, 1});
  auto now = Clock::now();
  addAll(c, {allreduceRequest(0, "grad/fc1", {2, 3})}, now);
  addAll(c, {allreduceRequest(1, "grad/fc1", {3, 3})}, now);
  auto ready = c.takeReady();
  CHECK_EQ(ready.size(), size_t{1});
  CHECK(ready[0].error);
  const auto& m = ready[0].error_message;
  CHECK(m.find("'grad/fc1'") != std::string::npos);
  CHECK(m.find("mismatched shape") != std::string::npos);
  CHECK(m.find("rank 0 has [2, 3]") != std::string::npos);
  CHECK(m.find("rank 1 has [3, 3]") != std::string::npos);
  // A disagreement, not a broken job: TensorFlow raises FailedPreconditionError.
  CHECK(ready[0].error_kind == StatusKind::kPrecondition);
}

TEST(CoordinatorReportsDtypeMismatch) {
  Coordinator c({0, 1});
  addAll(c, {allreduceRequest(0, "x", {2}, DataType::kFloat32)}, Clock::now());
  addAll(c, {allreduceRequest(1, "x", {2}, DataType::kFloat64)}, Clock::now());
  auto ready = c.takeReady();
  CHECK(ready[0].error_message.find("rank 1 has float64") != std::string::npos);
}

TEST(AllgatherMayDifferInFirstDimensionOnly) {
  Coordinator c({0, 1});
  Request a = allreduceRequest(0, "g", {2, 5});
  a.op = OpType::kAllgather;
  Request b = a;
  b.rank = 1;
  b.shape = {7, 5};
  addAll(c, {a, b}, Clock::now());
  auto ready = c.takeReady();
  CHECK(!ready[0].error);
  CHECK_EQ(ready[0].per_rank[1], 7);
  Request d = a;
  d.name = "h";
  Request e = d;
  e.rank = 1;
  e.shape = {2, 6};
  addAll(c, {d, e}, Clock::now());
  CHECK(c.takeReady()[0].error);
}

TEST(JoinedRanksCountAsReadyAndJoinCompletesWhenAllJoin) {
  Coordinator c({0, 1});
  Request join;
  join.op = OpType::kJoin;
  join.name = "__join";
  join.rank = 1;
  addAll(c, {join}, Clock::now());
  addAll(c, {allreduceRequest(0, "x", {4})}, Clock::now());
  auto ready = c.takeReady();
  CHECK_EQ(ready.size(), size_t{1});
  CHECK_EQ(ready[0].average_ranks, 2);  // Horovod's: the set's size, joined rank included
  join.rank = 0;
  addAll(c, {join}, Clock::now());
  ready = c.takeReady();
  CHECK_EQ(ready.size(), size_t{1});
  CHECK(ready[0].op == OpType::kJoin);
  CHECK_EQ(ready[0].value, 0);  // rank 0 joined last
}

namespace {
Request joinRequest(int rank) {
  Request join;
  join.op = OpType::kJoin;
  join.name = kJoinName;
  join.rank = rank;
  return join;
}
}  // namespace

TEST(AverageOverActiveRanksOnlyWhenAskedTo) {
  Coordinator c({0, 1, 2}, /*average_active=*/true);
  addAll(c, {joinRequest(1), allreduceRequest(0, "x", {4}), allreduceRequest(2, "x", {4})}, Clock::now());
  auto ready = c.takeReady();
  CHECK_EQ(ready.size(), size_t{1});
  CHECK_EQ(ready[0].average_ranks, 2);
}

TEST(GatheringAndScatteringCollectivesFailWhileARankHasJoined) {
  for (OpType op : {OpType::kAllgather, OpType::kBroadcast, OpType::kAlltoall, OpType::kReducescatter}) {
    Coordinator c({4, 5, 6});  // set ranks 0..2 are global ranks 4..6
    auto a = allreduceRequest(0, "t", {3});
    a.op = op;
    a.splits = {1, 1, 1};
    auto b = a;
    b.rank = 2;
    addAll(c, {joinRequest(1), a, b}, Clock::now());
    auto ready = c.takeReady();
    CHECK_EQ(ready.size(), size_t{1});
    CHECK(ready[0].error);
    CHECK(ready[0].error_message.find(std::string(opTypeName(op)) + " of 't' failed: " + opTypeName(op) +
                                      " is not supported with join() at this time: rank(s) [5] have joined") !=
          std::string::npos);
    // Once everyone has joined, the same collective works again.
    addAll(c, {joinRequest(0), joinRequest(2)}, Clock::now());
    CHECK_EQ(c.takeReady()[0].value, 6);  // global rank of the last to join
    a.name = b.name = "t2";
    auto d = a;
    d.rank = 1;
    addAll(c, {a, b, d}, Clock::now());
    ready = c.takeReady();
    CHECK_EQ(ready.size(), size_t{1});
    CHECK(!ready[0].error);
  }
}

TEST(GroupIsReleasedWhole) {
  Coordinator c({0});
  Request a = allreduceRequest(0, "g.0", {1});
  a.group = "g";
  a.group_size = 2;
  addAll(c, {a}, Clock::now());
  CHECK(c.takeReady().empty());
  Request b = a;
  b.name = "g.1";
  addAll(c, {b}, Clock::now());
  CHECK_EQ(c.takeReady().size(), size_t{2});
}

TEST(StallReportNamesMissingRanks) {
  Coordinator c({0, 1, 2});
  auto then = Clock::now() - std::chrono::seconds(100);
  addAll(c, {allreduceRequest(0, "late", {1})}, then);
  auto report = c.stallReport(Clock::now(), std::chrono::seconds(60));
  CHECK(report.find("'late'") != std::string::npos);
  CHECK(report.find("missing on ranks [1, 2]") != std::string::npos);
  auto failed = c.failStalled(Clock::now(), std::chrono::seconds(90));
  CHECK_EQ(failed.size(), size_t{1});
  CHECK(failed[0].error_message.find("stalled") != std::string::npos);
  // A timeout (Python: StallTimeoutError), naming the missing ranks as fields.
  CHECK(failed[0].error_kind == StatusKind::kTimeout);
  CHECK(failed[0].error_details->missing_ranks == (std::vector<int32_t>{1, 2}));
}

TEST(StallReportTravelsWithTheResponses) {
  Response r;
  r.name = "x";
  std::string note;
  auto back = parseResponses(serializeResponses({r}, "stall: 'x' is missing on ranks [1]"), &note);
  CHECK_EQ(back.size(), size_t{1});
  CHECK_EQ(note, std::string("stall: 'x' is missing on ranks [1]"));
}

TEST(JoinIsReportedAndFailedOnlyWhenNothingElseCompletes) {
  Coordinator c({0, 1, 2});
  auto then = Clock::now() - std::chrono::seconds(100);
  addAll(c, {joinRequest(0)}, then);
  // Ranks 1 and 2 still train: their collectives complete, so the join waits quietly.
  addAll(c, {allreduceRequest(1, "x", {1}), allreduceRequest(2, "x", {1})}, Clock::now());
  CHECK_EQ(c.takeReady().size(), size_t{1});
  CHECK(c.stallReport(Clock::now(), std::chrono::seconds(60)).empty());
  CHECK(c.failStalled(Clock::now(), std::chrono::seconds(90)).empty());
  // Nothing completes for a while: the join is reported, then failed on the joined rank.
  auto later = Clock::now() + std::chrono::seconds(100);
  auto report = c.stallReport(later, std::chrono::seconds(60));
  CHECK(report.find("join() (waited 200 s): joined on ranks [0], missing on ranks [1, 2]") !=
        std::string::npos);
  auto failed = c.failStalled(later, std::chrono::seconds(90));
  CHECK_EQ(failed.size(), size_t{1});
  CHECK(failed[0].op == OpType::kJoin && failed[0].error);
  CHECK(failed[0].error_message.find("join() stalled for 90 s waiting for ranks [1, 2]") !=
        std::string::npos);
  CHECK(!c.anyJoined());
}

TEST(CacheHitsStaleAndEviction) {
  ResponseCache cache(2);
  Response r;
  r.name = "a";
  Request q = allreduceRequest(0, "a", {2});
  cache.put(r, q);
  size_t slot = 99;
  CHECK(cache.lookup(q, &slot) == ResponseCache::Match::kHit);
  CHECK_EQ(slot, size_t{0});
  Request changed = allreduceRequest(0, "a", {3});
  CHECK(cache.lookup(changed, &slot) == ResponseCache::Match::kStale);
  Response b;
  b.name = "b";
  cache.put(b, allreduceRequest(0, "b", {1}));
  cache.touch(0);  // "a" is now the most recent, so "b" is evicted next
  Response c;
  c.name = "c";
  cache.put(c, allreduceRequest(0, "c", {1}));
  CHECK(cache.slotOf("b") == std::nullopt);
  CHECK(cache.slotOf("a").has_value());
  CHECK_EQ(*cache.slotOf("c"), size_t{1});
}

// Note [Cache bits as far as used]: the exchange covers the slots below
// slotsInUse(), which only grows, and grows only when a put fills a slot above.
TEST(CacheSlotsInUseIsOnePastTheHighestSlotEverFilled) {
  ResponseCache cache(130);
  CHECK_EQ(cache.slotsInUse(), size_t{0});
  for (int i = 0; i < 70; ++i) {
    Response r;
    r.name = "t" + std::to_string(i);
    cache.put(r, allreduceRequest(0, r.name, {1}));
  }
  CHECK_EQ(cache.slotsInUse(), size_t{70});  // two words of bits
  cache.erase(69);
  cache.erase(3);
  CHECK_EQ(cache.slotsInUse(), size_t{70});  // an emptied slot may be refilled
  Response again;
  again.name = "again";
  cache.put(again, allreduceRequest(0, "again", {1}));
  CHECK_EQ(*cache.slotOf("again"), size_t{3});  // the lowest free slot
  CHECK_EQ(cache.slotsInUse(), size_t{70});
  Response next;
  next.name = "next";
  cache.put(next, allreduceRequest(0, "next", {1}));
  CHECK_EQ(*cache.slotOf("next"), size_t{69});
  CHECK_EQ(cache.slotsInUse(), size_t{70});
}

TEST(FusionPacksCompatibleResponsesUpToThreshold) {
  std::vector<Response> rs(5);
  for (int i = 0; i < 5; ++i) {
    rs[i].name = "t" + std::to_string(i);
    rs[i].op = OpType::kAllreduce;
    rs[i].shape = {10};  // 40 bytes of float32
    rs[i].average_ranks = 2;
  }
  rs[2].dtype = DataType::kFloat64;  // cannot share a float32 buffer
  rs[3].op = OpType::kBroadcast;     // never fused
  auto batches = planFusion(rs, 80);
  // t0+t1 (80 bytes), t2 alone, t3 alone, t4 (threshold reached: new batch)
  CHECK_EQ(batches.size(), size_t{4});
  CHECK_EQ(batches[0].members.size(), size_t{2});
  CHECK_EQ(batches[0].bytes, int64_t{80});
  CHECK_EQ(batches[3].members[0]->name, std::string("t4"));
}

TEST(FusionKeepsGroupsTogetherBeyondThreshold) {
  std::vector<Response> rs(3);
  for (int i = 0; i < 3; ++i) {
    rs[i].name = "g." + std::to_string(i);
    rs[i].shape = {100};
    rs[i].group = "g";
    rs[i].group_size = 3;
  }
  CHECK_EQ(planFusion(rs, 10).size(), size_t{1});
}

// Packing and unpacking a batch range by range, at every cut, gives what
// packing it whole gives: the pipelined allreduce relies on it.
TEST(FusionRangesPackAndUnpackAcrossMemberBoundaries) {
  std::vector<Response> rs(3);
  std::vector<std::vector<float>> inputs{{1, 2, 3}, {4, 5}, {6, 7, 8, 9}};
  std::vector<std::vector<float>> outputs(3);
  std::vector<TensorEntryPtr> entries;
  for (int i = 0; i < 3; ++i) {
    rs[i].name = "t" + std::to_string(i);
    rs[i].shape = {static_cast<int64_t>(inputs[i].size())};
    rs[i].prescale = 2.0;
    outputs[i].assign(inputs[i].size(), 0);
    auto e = std::make_unique<TensorEntry>();
    e->input = inputs[i].data();
    e->output = outputs[i].data();
    entries.push_back(i == 1 ? nullptr : std::move(e));  // rank joined: no t1
  }
  auto batches = planFusion(rs, 1 << 20);
  CHECK_EQ(batches.size(), size_t{1});
  const Batch& batch = batches[0];
  for (size_t chunk = 4; chunk <= 36; chunk += 4) {
    std::vector<float> packed(9, -1);
    for (size_t begin = 0; begin < 36; begin += chunk) {
      size_t end = std::min<size_t>(36, begin + chunk);
      std::vector<uint8_t> staging(end - begin);
      packRange(batch, entries, begin, end, ReduceOp::kSum, staging.data());
      std::memcpy(reinterpret_cast<uint8_t*>(packed.data()) + begin, staging.data(), end - begin);
      unpackRange(batch, entries, begin, end, staging.data());
    }
    CHECK(packed == std::vector<float>({2, 4, 6, 0, 0, 12, 14, 16, 18}));
    CHECK(outputs[0] == std::vector<float>({2, 4, 6}));
    CHECK(outputs[2] == std::vector<float>({12, 14, 16, 18}));
  }
}

// --- call sites, details and divergence (Note [Call sites], Note [Divergence])

namespace {

Request sited(Request r, const std::string& file, int line, const std::string& function) {
  r.call_site = std::make_shared<const CallSite>(CallSite{file, line, function});
  return r;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(RequestsCarryCallSiteWaitAndRankStateButCompareWithout) {
  Request r = sited(allreduceRequest(1, "grad/w", {3}), "train.py", 42, "step");
  r.waited_ms = 2500;
  RankState state;
  state.blocked = true;
  RankState back_state;
  auto back = parseRequests(serializeRequests({r}, state), &back_state);
  CHECK(back[0].call_site && *back[0].call_site == *r.call_site);
  CHECK(!parseRequests(serializeRequests({allreduceRequest(0, "x", {1})}))[0].call_site);  // unknown
  CHECK_EQ(back[0].waited_ms, uint32_t{2500});
  CHECK(back_state.blocked);
  // A name called from another line is still the same request: a cache hit.
  Request elsewhere = sited(r, "train.py", 57, "evaluate");
  elsewhere.waited_ms = 0;
  CHECK(elsewhere.sameParameters(r));
  RankState idle;
  parseRequests(serializeRequests({}, {}), &idle);
  CHECK(!idle.blocked);
}

TEST(ErrorDetailsSurviveResponsesAndFailureRecords) {
  auto details = std::make_shared<ErrorDetails>();
  details->tensor_names = {"x"};
  details->ranks = {3};
  details->missing_ranks = {3};
  details->hosts = {"hostB"};
  details->lost_hosts = {"hostB"};
  details->field = "shape";
  details->calls = {{3, "x", "allreduce", {"t.py", 7, "f"}, "[2]", true}};
  Response r;
  r.name = "x";
  r.error = true;
  r.error_kind = StatusKind::kDivergence;
  r.error_details = details;
  Response ok;
  ok.error_details = details;  // not sent: only errors carry details
  auto back = parseResponses(serializeResponses({r, ok}));
  CHECK(back[0].error_kind == StatusKind::kDivergence);
  const auto& d = *back[0].error_details;
  CHECK(d.ranks == details->ranks && d.missing_ranks == details->missing_ranks);
  CHECK(d.hosts == details->hosts && d.lost_hosts == details->lost_hosts && d.field == "shape");
  CHECK_EQ(d.calls.size(), size_t{1});
  CHECK(d.calls[0].site == details->calls[0].site && d.calls[0].value == "[2]" && d.calls[0].blocked);
  CHECK(!back[1].error_details);
  auto failure = parseFailure(serializeFailure(Status::Error(StatusKind::kTransport, "lost", details)));
  CHECK(failure.kind == StatusKind::kTransport && failure.message == "lost");
  CHECK(failure.details && failure.details->lost_hosts == details->lost_hosts);
  CHECK(!parseFailure(serializeFailure(Status::Error(StatusKind::kTimeout, "slow"))).details);
}

TEST(CountsFromAPeerAreCheckedBeforeAnythingIsAllocated) {
  std::string forged =
      serializeFailure(Status::Error(StatusKind::kTransport, "x", std::make_shared<ErrorDetails>()));
  // The details' first count (tensor names), after the kind, the message's
  // length, "x" and the details flag, says 2^32 - 1 items.
  const size_t count_at = 1 + sizeof(uint32_t) + 1 + 1;
  uint32_t huge = 0xffffffffu;
  std::memcpy(&forged[count_at], &huge, sizeof(huge));
  CHECK_THROWS(parseFailure(forged), Error, "claiming 4294967295 strings");
}

TEST(MismatchNamesEachRanksValueAndCallSite) {
  Coordinator c({0, 1});
  addAll(c, {sited(allreduceRequest(0, "grad/fc1", {2, 3}), "train.py", 42, "step")}, Clock::now());
  addAll(c, {sited(allreduceRequest(1, "grad/fc1", {3, 3}), "train.py", 57, "evaluate")}, Clock::now());
  auto ready = c.takeReady();
  CHECK_EQ(ready.size(), size_t{1});
  const auto& m = ready[0].error_message;
  CHECK(has(m, "rank 0 has [2, 3] at train.py:42 in step()"));
  CHECK(has(m, "rank 1 has [3, 3] at train.py:57 in evaluate()"));
  const auto& d = *ready[0].error_details;
  CHECK_EQ(d.field, std::string("shape"));
  CHECK(d.ranks == (std::vector<int32_t>{0, 1}));
  CHECK_EQ(d.calls.size(), size_t{2});
  CHECK_EQ(d.calls[1].value, std::string("[3, 3]"));
  CHECK_EQ(d.calls[1].site.line, 57);
}

TEST(StallReportNamesWhereEachRankSubmittedAndWhatTheMissingOnesWaitOn) {
  Coordinator c({0, 1, 2});
  auto then = Clock::now() - std::chrono::seconds(100);
  addAll(c, {sited(allreduceRequest(0, "loss", {1}), "train.py", 42, "step"),
         sited(allreduceRequest(1, "loss", {1}), "train.py", 42, "step")},
        then);
  addAll(c, {sited(allreduceRequest(2, "val_loss", {1}), "train.py", 57, "evaluate")}, then);
  auto report = c.stallReport(Clock::now(), std::chrono::seconds(60));
  CHECK(has(report, "'loss' (allreduce, waited 100 s): ready on ranks [0, 1], missing on ranks [2]"));
  CHECK(has(report, "ranks [0, 1]: submitted it at train.py:42 in step()"));
  CHECK(has(report, "rank 2: waiting instead on 'val_loss' (allreduce) at train.py:57 in evaluate()"));
  auto failed = c.failStalled(Clock::now(), std::chrono::seconds(90));
  CHECK_EQ(failed.size(), size_t{2});
  CHECK(has(failed[0].error_message, "rank 2: waiting instead on 'val_loss' (allreduce) at train.py:57"));
  const auto& calls = failed[0].error_details->calls;
  CHECK(calls.size() == 3 && calls[2].rank == 2 && calls[2].tensor == "val_loss");
}

TEST(DivergenceIsReportedOnceAfterTheGraceAndFailedOnlyWhenEveryRankIsBlocked) {
  Coordinator c({0, 1});
  auto t0 = Clock::now();
  addAll(c, {sited(allreduceRequest(0, "loss", {1}), "train.py", 42, "step")}, t0);
  addAll(c, {sited(allreduceRequest(1, "val_loss", {1}), "train.py", 57, "evaluate")}, t0);
  CHECK(c.takeReady().empty());
  using std::chrono::seconds;
  CHECK(c.divergenceReport(t0 + seconds(4), seconds(5)).empty());
  auto report = c.divergenceReport(t0 + seconds(6), seconds(5));
  CHECK(has(report, "rank 0: waiting on 'loss' (allreduce) at train.py:42 in step()"));
  CHECK(has(report, "rank 1: waiting on 'val_loss' (allreduce) at train.py:57 in evaluate()"));
  CHECK(has(report, "(for 6.0 s)"));
  CHECK(c.divergenceReport(t0 + seconds(7), seconds(5)).empty());  // once per divergence
  // Ranks that are not all blocked may still submit what the others wait on.
  CHECK(c.failDiverged(t0 + seconds(20), seconds(10), "over").empty());
  c.setRankState(0, RankState{true});
  CHECK(c.failDiverged(t0 + seconds(20), seconds(10), "over").empty());
  c.setRankState(1, RankState{true});
  CHECK(c.failDiverged(t0 + seconds(9), seconds(10), "over").empty());
  auto failed = c.failDiverged(t0 + seconds(20), seconds(10), "over");
  CHECK_EQ(failed.size(), size_t{2});
  for (const auto& f : failed) {
    CHECK(f.error && f.error_kind == StatusKind::kDivergence);
    CHECK(has(f.error_message, "of '" + f.name + "' failed: the ranks wait on different collectives"));
    CHECK(has(f.error_message, "rank 1: waiting on 'val_loss' (allreduce) at train.py:57 in evaluate() [blocked]"));
    CHECK(has(f.error_message, "\nover"));
    CHECK(f.error_details->ranks == (std::vector<int32_t>{0, 1}));
    CHECK_EQ(f.error_details->calls.size(), size_t{2});
  }
  CHECK(c.divergenceReport(t0 + seconds(30), seconds(5)).empty());  // nothing left
}

TEST(ARankWaitingOnNothingIsALatePeerNotADivergence) {
  Coordinator c({0, 1});
  auto t0 = Clock::now();
  addAll(c, {allreduceRequest(0, "x", {1})}, t0);
  c.setRankState(0, RankState{true});
  c.setRankState(1, RankState{true});
  CHECK(c.divergenceReport(t0 + std::chrono::seconds(100), std::chrono::seconds(5)).empty());
  CHECK(c.failDiverged(t0 + std::chrono::seconds(100), std::chrono::seconds(10), "").empty());
}

TEST(DivergenceCountsFromWhenTheWaitsBeganAndFromTheLastCompletion) {
  Coordinator c({0, 1});
  auto t0 = Clock::now();
  Request a = allreduceRequest(0, "a", {1}), b = allreduceRequest(1, "b", {1});
  a.waited_ms = b.waited_ms = 4000;  // sent in full after waiting as cache bits
  addAll(c, {a}, t0);
  addAll(c, {b}, t0);
  CHECK(!c.divergenceReport(t0 + std::chrono::seconds(2), std::chrono::seconds(5)).empty());
  // The stall count too: a tensor waits since its first rank began to.
  CHECK(c.stallReport(t0 + std::chrono::seconds(2), std::chrono::seconds(5)).find("'a' (allreduce, waited 6 s)") !=
        std::string::npos);
  // Something completes: the count starts again.
  Coordinator d({0, 1});
  d.add(0, {allreduceRequest(0, "a", {1}), allreduceRequest(0, "done", {1})}, t0);
  d.add(1, {allreduceRequest(1, "b", {1}), allreduceRequest(1, "done", {1})}, t0);
  CHECK_EQ(d.takeReady().size(), size_t{1});
  auto completed = Clock::now();
  CHECK(d.divergenceReport(completed + std::chrono::seconds(4), std::chrono::seconds(5)).empty());
  CHECK(!d.divergenceReport(completed + std::chrono::seconds(6), std::chrono::seconds(5)).empty());
}

TEST(CachedCompletionsAreProgressToo) {
  // Ranks in lockstep on cached tensors while each also waits on a name the
  // other submits later: not stuck, so not (yet) a divergence.
  Coordinator c({0, 1});
  auto t0 = Clock::now();
  addAll(c, {allreduceRequest(0, "a", {1})}, t0);
  addAll(c, {allreduceRequest(1, "b", {1})}, t0);
  c.setRankState(0, RankState{true});
  c.setRankState(1, RankState{true});
  c.noteProgress(t0 + std::chrono::seconds(8));
  CHECK(c.divergenceReport(t0 + std::chrono::seconds(12), std::chrono::seconds(5)).empty());
  CHECK(c.failDiverged(t0 + std::chrono::seconds(17), std::chrono::seconds(10), "").empty());
  CHECK(!c.divergenceReport(t0 + std::chrono::seconds(14), std::chrono::seconds(5)).empty());
  CHECK_EQ(c.failDiverged(t0 + std::chrono::seconds(19), std::chrono::seconds(10), "").size(), size_t{2});
}

TEST(DivergenceWithAJoinedRankFailsTheJoinAndHeldGroupsToo) {
  Coordinator c({0, 1, 2});
  auto t0 = Clock::now();
  addAll(c, {joinRequest(0)}, t0);
  Request g0 = allreduceRequest(1, "g.0", {1});
  g0.group = "g";
  g0.group_size = 2;
  Request g0_on_2 = g0;
  g0_on_2.rank = 2;
  addAll(c, {g0, sited(allreduceRequest(1, "a", {1}), "t.py", 1, "f")}, t0);
  addAll(c, {g0_on_2, sited(allreduceRequest(2, "b", {1}), "t.py", 2, "g")}, t0);
  CHECK(c.takeReady().empty());  // g.0 is held until g.1 comes
  auto report = c.divergenceReport(t0 + std::chrono::seconds(6), std::chrono::seconds(5));
  CHECK(has(report, "rank 0: in join() [blocked]"));
  CHECK(has(report, "rank 1: waiting on 'a' (allreduce) at t.py:1 in f()"));
  for (int r = 0; r < 3; ++r) c.setRankState(r, RankState{r != 0});
  auto failed = c.failDiverged(t0 + std::chrono::seconds(11), std::chrono::seconds(10), "");
  CHECK_EQ(failed.size(), size_t{4});  // a, b, the held g.0, the join
  CHECK(failed[2].name == "g.0" && failed[2].error_kind == StatusKind::kDivergence);
  CHECK(failed[3].op == OpType::kJoin && failed[3].error);
  CHECK(!c.anyJoined());
}

int main() { return RUN_ALL_TESTS(); }
