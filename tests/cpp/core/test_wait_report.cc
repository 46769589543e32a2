// Unit tests of call sites (core/call_site.h) and the words of the reports
// about ranks that wait on each other (core/wait_report.h).
#include <thread>

#include "core/call_site.h"
#include "core/wait_report.h"
#include "testing.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Request waitingOn(const std::string& name, OpType op, CallSite site) {
  Request r;
  r.name = name;
  r.op = op;
  if (site.known()) r.call_site = std::make_shared<const CallSite>(std::move(site));
  return r;
}

}  // namespace

TEST(CallSitesReadAsFileLineAndFunction) {
  CHECK_EQ(CallSite({"train.py", 42, "step"}).text(), std::string("train.py:42 in step()"));
  CHECK_EQ(CallSite({"train.py", 42, ""}).text(), std::string("train.py:42"));
  CHECK_EQ(CallSite().text(), std::string("call site unknown"));
  CHECK_EQ(atSite(CallSite()), std::string());
}

TEST(TheTableInternsEachSiteOnceAcrossThreads) {
  CallSiteTable table;
  CHECK(table.intern(CallSite()) == nullptr);
  const CallSite* first = table.intern({"a.py", 1, "f"});
  std::vector<const CallSite*> seen(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) seen[t] = table.intern({"a.py", 1 + i % 3, "f"});
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(table.intern({"a.py", 1, "f"}) == first);
  CHECK_EQ(table.size(), size_t{3});
  CHECK(table.intern({"a.py", 1, "g"}) != first);  // another function is another site
}

TEST(ARanksWaitsReadAsOneLine) {
  Request a = waitingOn("loss", OpType::kAllreduce, {"train.py", 42, "step"});
  Request b = waitingOn("ids", OpType::kAllgather, {});
  RankWaits one{0, false, true, {&a}};
  CHECK_EQ(describeWaits(one), std::string("waiting on 'loss' (allreduce) at train.py:42 in step() [blocked]"));
  CHECK_EQ(describeWaits(one, true),
           std::string("waiting instead on 'loss' (allreduce) at train.py:42 in step() [blocked]"));
  RankWaits two{1, false, false, {&a, &b}};
  CHECK_EQ(describeWaits(two), std::string("waiting on 2 collectives: 'loss' (allreduce) at train.py:42 in "
                                           "step(), 'ids' (allgather)"));
  RankWaits many{2, false, false, {&a, &a, &a, &a, &a, &b}};
  CHECK(has(describeWaits(many), ", and 2 more"));
  RankWaits idle{3, false, false, {}};
  CHECK(has(describeWaits(idle), "nothing submitted to this process set"));
  RankWaits joined{4, true, true, {}};
  CHECK_EQ(describeWaits(joined), std::string("in join() [blocked]"));
}

TEST(ADivergenceReportHasALinePerRankAndSaysWhatToLookFor) {
  Request a = waitingOn("loss", OpType::kAllreduce, {"train.py", 42, "step"});
  Request b = waitingOn("val_loss", OpType::kAllreduce, {"train.py", 57, "evaluate"});
  auto report = divergenceReport({{0, false, true, {&a}}, {1, false, true, {&b}}}, 5.04);
  CHECK(has(report, "the ranks wait on different collectives, so none can complete (for 5.0 s):\n"
                    "  rank 0: waiting on 'loss' (allreduce) at train.py:42 in step() [blocked]\n"
                    "  rank 1: waiting on 'val_loss' (allreduce) at train.py:57 in evaluate() [blocked]\n"));
  CHECK(has(report, "took another branch, skipped a step, or orders its collectives differently"));
  ErrorDetails details;
  addCalls({1, false, true, {&b}}, details);
  addCalls({2, true, true, {}}, details);
  CHECK_EQ(details.calls.size(), size_t{2});
  CHECK(details.calls[0].tensor == "val_loss" && details.calls[0].site.line == 57 && details.calls[0].blocked);
  CHECK(details.calls[1].rank == 2 && details.calls[1].tensor.empty() && details.calls[1].op == "join");
}

int main() { return RUN_ALL_TESTS(); }
