// Note [The runtime without a lock on the caller's path] (api/session.cc):
// callers submit and wait through a RuntimeUse while another thread shuts
// the runtime down and starts a new one, over and over (an elastic reset
// in a loop). Every call either completes with the right sum, or is refused
// or failed with the words of a stopped or missing runtime; none touches a
// runtime that shutdown() destroyed, and shutdown() does not return while
// one is still in use.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/api.h"
#include "api/sample_request.h"
#include "api/session.h"
#include "common/errors.h"
#include "core/status.h"
#include "testing.h"

using namespace hvdlite;

namespace {

struct Tally {
  std::atomic<int> completed{0};
  std::atomic<int> refused{0};  // no runtime, or a stopped one
  std::atomic<int> wrong{0};
  std::string first_wrong;  // written once, by whoever counted wrong first
};

// One caller: submits and waits in a loop on `session` until `stop`.
void caller(api::Session& session, int id, const std::atomic<bool>& stop, Tally& tally) {
  const std::string name = "swap." + std::to_string(id);
  while (!stop.load()) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    auto request = testing::sampleAllreduce(name.c_str(), data);
    request.flags = HVDLITE_REQUEST_NO_WAKE;
    auto handle = std::make_shared<api::Handle>();
    std::string failure;
    try {
      session.submit(request, {handle, {}, {}});
      while (!session.wait(*handle, std::chrono::milliseconds(100))) {
      }
      if (handle->status.ok()) {
        if (data[5] == 6.0f) ++tally.completed;  // a sum over one rank, in place
        else failure = "completed with " + std::to_string(data[5]);
      } else {
        ++tally.refused;  // failed by the shutdown that raced with it
      }
    } catch (const InvalidArgument& e) {
      if (std::string(e.what()).find("call hvdlite.init() first") != std::string::npos) ++tally.refused;
      else failure = e.what();
    } catch (const core::StatusError&) {
      ++tally.refused;  // submitted to a runtime that had stopped
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (!failure.empty() && tally.wrong++ == 0) tally.first_wrong = failure;
  }
}

}  // namespace

TEST(CallersRunWhileTheRuntimeIsShutDownAndStartedAgain) {
  api::Session session;
  session.init({}, {});
  std::atomic<bool> stop{false};
  Tally tally;
  std::vector<std::thread> callers;
  for (int id = 0; id < 3; ++id) callers.emplace_back([&, id] { caller(session, id, stop, tally); });
  for (int round = 0; round < 40; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    session.shutdown();
    CHECK(!session.initialized());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    session.init({}, {});
    CHECK(session.initialized());
  }
  stop = true;
  for (auto& t : callers) t.join();
  if (tally.wrong > 0) throw testing::Failure("a call went wrong: " + tally.first_wrong);
  CHECK(tally.completed > 0);
  // After the loop the session works as a fresh one does.
  float data[6] = {1, 2, 3, 4, 5, 6};
  auto request = testing::sampleAllreduce("after", data);
  request.flags = HVDLITE_REQUEST_NO_WAKE;
  auto handle = std::make_shared<api::Handle>();
  session.submit(request, {handle, {}, {}});
  CHECK(session.wait(*handle));
  CHECK(handle->status.ok());
  session.shutdown();
}

TEST(ShutdownReturnsOnlyOnceNoThreadUsesTheRuntime) {
  // A handle no entry completes: its waiter stays in wait(), using the
  // runtime, for the whole slice, and shutdown() returns only after it left.
  api::Session session;
  session.init({}, {});
  api::Handle never_submitted;
  std::atomic<bool> waiting{false}, left{false}, done{true};
  std::thread waiter([&] {
    waiting = true;
    done = session.wait(never_submitted, std::chrono::milliseconds(300));
    left = true;
  });
  while (!waiting) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(!left.load());
  session.shutdown();
  CHECK(left.load());
  waiter.join();
  CHECK(!done.load());
}

TEST(NothingIsInUseBeforeInit) {
  api::Session session;
  CHECK(!session.initialized());
  float data[6] = {};
  auto handle = std::make_shared<api::Handle>();
  CHECK_THROWS(session.submit(testing::sampleAllreduce("w", data), {handle, {}, {}}), InvalidArgument,
               "call hvdlite.init() first");
  session.shutdown();  // nothing to shut down, nothing to wait for
  CHECK(!session.initialized());
}

int main() { return RUN_ALL_TESTS(); }
