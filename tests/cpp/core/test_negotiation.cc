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
  CHECK_THROWS(parseRequests(bytes.substr(0, bytes.size() - 3)), Error, "truncated");
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
  c.add(adds, Clock::now());
  c.add(removes, Clock::now());
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
  c.add({add0, remove0}, Clock::now());
  c.add({add1, remove1}, Clock::now());
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
  c.add({allreduceRequest(0, "x", {2})}, now);
  c.add({allreduceRequest(2, "x", {2})}, now);
  CHECK(c.takeReady().empty());
  c.add({allreduceRequest(1, "x", {2})}, now);
  auto ready = c.takeReady();
  CHECK_EQ(ready.size(), size_t{1});
  CHECK(!ready[0].error);
  CHECK_EQ(ready[0].average_ranks, 3);
}

TEST(CoordinatorNamesTheMismatchedFieldAndEveryRanksValue) {
  Coordinator c({0, 1});
  auto now = Clock::now();
  c.add({allreduceRequest(0, "grad/fc1", {2, 3})}, now);
  c.add({allreduceRequest(1, "grad/fc1", {3, 3})}, now);
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
  c.add({allreduceRequest(0, "x", {2}, DataType::kFloat32)}, Clock::now());
  c.add({allreduceRequest(1, "x", {2}, DataType::kFloat64)}, Clock::now());
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
  c.add({a, b}, Clock::now());
  auto ready = c.takeReady();
  CHECK(!ready[0].error);
  CHECK_EQ(ready[0].per_rank[1], 7);
  Request d = a;
  d.name = "h";
  Request e = d;
  e.rank = 1;
  e.shape = {2, 6};
  c.add({d, e}, Clock::now());
  CHECK(c.takeReady()[0].error);
}

TEST(JoinedRanksCountAsReadyAndJoinCompletesWhenAllJoin) {
  Coordinator c({0, 1});
  Request join;
  join.op = OpType::kJoin;
  join.name = "__join";
  join.rank = 1;
  c.add({join}, Clock::now());
  c.add({allreduceRequest(0, "x", {4})}, Clock::now());
  auto ready = c.takeReady();
  CHECK_EQ(ready.size(), size_t{1});
  CHECK_EQ(ready[0].average_ranks, 2);  // Horovod's: the set's size, joined rank included
  join.rank = 0;
  c.add({join}, Clock::now());
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
  c.add({joinRequest(1), allreduceRequest(0, "x", {4}), allreduceRequest(2, "x", {4})}, Clock::now());
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
    c.add({joinRequest(1), a, b}, Clock::now());
    auto ready = c.takeReady();
    CHECK_EQ(ready.size(), size_t{1});
    CHECK(ready[0].error);
    CHECK(ready[0].error_message.find(std::string(opTypeName(op)) + " of 't' failed: " + opTypeName(op) +
                                      " is not supported with join() at this time: rank(s) [5] have joined") !=
          std::string::npos);
    // Once everyone has joined, the same collective works again.
    c.add({joinRequest(0), joinRequest(2)}, Clock::now());
    CHECK_EQ(c.takeReady()[0].value, 6);  // global rank of the last to join
    a.name = b.name = "t2";
    auto d = a;
    d.rank = 1;
    c.add({a, b, d}, Clock::now());
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
  c.add({a}, Clock::now());
  CHECK(c.takeReady().empty());
  Request b = a;
  b.name = "g.1";
  c.add({b}, Clock::now());
  CHECK_EQ(c.takeReady().size(), size_t{2});
}

TEST(StallReportNamesMissingRanks) {
  Coordinator c({0, 1, 2});
  auto then = Clock::now() - std::chrono::seconds(100);
  c.add({allreduceRequest(0, "late", {1})}, then);
  auto report = c.stallReport(Clock::now(), std::chrono::seconds(60));
  CHECK(report.find("'late'") != std::string::npos);
  CHECK(report.find("missing on ranks [1, 2]") != std::string::npos);
  auto failed = c.failStalled(Clock::now(), std::chrono::seconds(90));
  CHECK_EQ(failed.size(), size_t{1});
  CHECK(failed[0].error_message.find("stalled") != std::string::npos);
  CHECK(failed[0].error_kind == StatusKind::kCollective);
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
  c.add({joinRequest(0)}, then);
  // Ranks 1 and 2 still train: their collectives complete, so the join waits quietly.
  c.add({allreduceRequest(1, "x", {1}), allreduceRequest(2, "x", {1})}, Clock::now());
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

int main() { return RUN_ALL_TESTS(); }
