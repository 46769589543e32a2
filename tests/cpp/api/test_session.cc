// Session::submit, the one way into the core (Note [One way in] in
// api/session.h): a request completes through a Handle or a callback alike,
// and a bad one is refused before anything is queued, in the same words
// whichever completion it asked for and whether it came through the C API.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/api.h"
#include "api/session.h"
#include "common/errors.h"
#include "api/sample_request.h"
#include "testing.h"

using namespace hvdlite;

namespace {

using testing::sampleAllreduce;

api::Completion byHandle(std::shared_ptr<api::Handle>* handle) {
  *handle = std::make_shared<api::Handle>();
  return {*handle, {}, {}};
}

struct Calls {
  std::atomic<int> count{0};
  std::atomic<int> kind{-1};
};

api::Completion byCallback(Calls* calls) {
  api::Completion completion;
  completion.callback = [calls](core::TensorEntry&, const core::Status& status) {
    calls->kind = static_cast<int>(status.kind);
    ++calls->count;
  };
  return completion;
}

// The message submit() refuses `request` with; "" when it was accepted.
std::string refusal(const hvdlite_request& request, api::Completion completion) {
  try {
    api::session().submit(request, std::move(completion));
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

std::string cApiRefusal(const hvdlite_request& request) {
  char error[512] = "";
  auto done = [](void*, const hvdlite_result*) {};
  if (hvdlite_enqueue(&request, nullptr, done, nullptr, error, sizeof(error)) == HVDLITE_OK) return "";
  return error;
}

}  // namespace

TEST(SubmitBeforeInitChecksTheRequestFirstThenSaysToInit) {
  float data[6] = {};
  std::shared_ptr<api::Handle> handle;
  auto bad = sampleAllreduce("w", data);
  bad.dtype = 42;
  CHECK_THROWS(api::session().submit(bad, byHandle(&handle)), InvalidArgument,
               "allreduce of 'w': unknown dtype code 42");
  CHECK_THROWS(api::session().submit(sampleAllreduce("w", data), byHandle(&handle)), InvalidArgument,
               "call hvdlite.init() first");
  CHECK(!handle->isDone());
}

TEST(BothCompletionsAndTheCApiMeetTheSameChecks) {
  api::session().init({}, {});  // one rank
  float data[6] = {};
  std::shared_ptr<api::Handle> handle;
  Calls calls;
  auto wrong_set = sampleAllreduce("grad/w", data);
  wrong_set.process_set_id = 5;
  auto bad_root = sampleAllreduce("grad/b", data);
  bad_root.op = HVDLITE_OP_BROADCAST;
  bad_root.root_rank = 3;
  auto bad_code = sampleAllreduce("grad/c", data);
  bad_code.reduce_op = 77;
  for (const auto& [request, needle] : std::vector<std::pair<hvdlite_request, std::string>>{
           {wrong_set, "allreduce of 'grad/w': process set 5 does not exist"},
           {bad_root, "broadcast of 'grad/b': root_rank 3 is not a member of process set 0"},
           {bad_code, "allreduce of 'grad/c': unknown reduce op code 77"}}) {
    const std::string by_handle = refusal(request, byHandle(&handle));
    CHECK(by_handle.find(needle) != std::string::npos);
    CHECK_EQ(refusal(request, byCallback(&calls)), by_handle);
    CHECK_EQ(cApiRefusal(request), by_handle);
  }
  CHECK(!handle->isDone());
  CHECK_EQ(calls.count.load(), 0);  // refused: never queued, never called back
  api::session().shutdown();
}

TEST(ASubmissionNeedsAHandleOrACallback) {
  api::session().init({}, {});
  float data[6] = {};
  CHECK_THROWS(api::session().submit(sampleAllreduce("grad/w", data), api::Completion{}), InvalidArgument,
               "allreduce of 'grad/w': submitted with neither a handle nor a callback");
  api::session().shutdown();
}

TEST(AHandleCompletesOnceAndOwnsTheOutputTheCoreAllocated) {
  api::session().init({}, {});
  float data[6] = {1, 2, 3, 4, 5, 6};
  std::shared_ptr<api::Handle> reduced;
  auto request = sampleAllreduce("grad/w", data);
  request.flags = HVDLITE_REQUEST_NO_WAKE;  // this thread runs the cycle in wait()
  api::session().submit(request, byHandle(&reduced));
  CHECK(api::session().wait(*reduced));
  CHECK(reduced->status.ok());
  CHECK_EQ(data[5], 6.0f);  // a sum over one rank, in place
  CHECK_THROWS(api::session().wait(*reduced), InvalidArgument,
               "allreduce of 'grad/w': its handle was already synchronized");

  std::shared_ptr<api::Handle> gathered;
  auto gather = sampleAllreduce("gather/w", data);
  gather.op = HVDLITE_OP_ALLGATHER;
  gather.output = nullptr;
  api::session().submit(gather, byHandle(&gathered));
  CHECK(api::session().wait(*gathered));
  CHECK(gathered->output_shape == std::vector<int64_t>({2, 3}));
  CHECK(gathered->output != nullptr);
  CHECK_EQ(reinterpret_cast<float*>(gathered->output.get())[4], 5.0f);
  api::session().shutdown();
}

TEST(ACallbackRunsOnceWithTheStatus) {
  api::session().init({}, {});
  float data[6] = {1, 2, 3, 4, 5, 6};
  Calls calls;
  api::session().submit(sampleAllreduce("grad/w", data), byCallback(&calls));
  for (int i = 0; i < 5000 && calls.count == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK_EQ(calls.count.load(), 1);
  CHECK_EQ(calls.kind.load(), static_cast<int>(core::StatusKind::kOk));
  api::session().shutdown();
}

int main() { return RUN_ALL_TESTS(); }
