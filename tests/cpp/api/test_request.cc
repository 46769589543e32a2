// The one checked request builder (csrc/api/request.cc) and the C API's
// enqueue on top of it: every bad code or structure is refused with a message
// naming the tensor and the value, before anything is queued; the codes of
// api.h name the same things as types.h.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cctype>
#include <string>
#include <thread>
#include <vector>

#include "api/api.h"
#include "api/request.h"
#include "api/session.h"
#include "common/errors.h"
#include "core/entry_pool.h"
#include "api/sample_request.h"
#include "testing.h"

using namespace hvdlite;

namespace {

float kData[6] = {1, 2, 3, 4, 5, 6};

hvdlite_request allreduce(const char* name = "grad/w") { return testing::sampleAllreduce(name, kData); }

std::string lower(const char* s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

TEST(DefaultsAskForNothingOdd) {
  auto r = hvdlite_request_defaults();
  CHECK_EQ(r.prescale, 1.0);
  CHECK_EQ(r.postscale, 1.0);
  CHECK_EQ(r.device, -1);
  CHECK(r.name == nullptr && r.group == nullptr && r.flags == 0u);
}

TEST(EveryFieldReachesTheEntry) {
  const int64_t splits[] = {1, 1};
  const int64_t ranks[] = {0, 2};
  int event = 0, stream = 0;
  auto r = allreduce();
  r.op = HVDLITE_OP_ALLTOALL;
  r.process_set_id = 3;
  r.reduce_op = HVDLITE_REDUCE_MAX;
  r.prescale = 0.5;
  r.postscale = 4.0;
  r.root_rank = 1;
  r.splits = splits;
  r.num_splits = 2;
  r.device = 0;
  r.ready_event = &event;
  r.stream = &stream;
  r.group = "g";
  r.group_size = 2;
  r.process_set_ranks = ranks;
  r.num_process_set_ranks = 2;
  auto e = api::buildEntry(r);
  CHECK(e->op == OpType::kAlltoall);
  CHECK_EQ(e->name, std::string("grad/w"));
  CHECK_EQ(e->process_set_id, 3);
  CHECK(e->dtype == DataType::kFloat32);
  CHECK(e->shape == std::vector<int64_t>({2, 3}));
  CHECK(e->input == kData && e->output == kData);
  CHECK(e->reduce_op == ReduceOp::kMax);
  CHECK_EQ(e->prescale, 0.5);
  CHECK_EQ(e->postscale, 4.0);
  CHECK_EQ(e->root_rank, 1);
  CHECK(e->splits == std::vector<int64_t>({1, 1}));
  CHECK_EQ(e->device, 0);
  CHECK(e->ready_event == &event && e->stream == &stream);
  CHECK_EQ(e->group, std::string("g"));
  CHECK_EQ(e->group_size, 2);
  CHECK(e->process_set_ranks == std::vector<int64_t>({0, 2}));
}

// Note [A kept entry's name] in core/entry_pool.cc: a kept entry brings its
// last name, and each request's name replaces it exactly (the same, a
// prefix of it, a longer one, one past the short-string buffer).
TEST(AKeptEntrysNameIsReplacedByTheRequests) {
  const std::string long_name(100, 'w');
  for (const char* name : {"grad/w", "grad/w", "grad", "grad/w/longer", long_name.c_str(), "g", "grad/w"}) {
    auto e = api::buildEntry(allreduce(name));
    CHECK_EQ(e->name, std::string(name));
    std::vector<core::TensorEntryPtr> done;
    done.push_back(std::move(e));
    core::keepEntries(done);  // this thread's own: the next buildEntry takes it back
  }
}

TEST(ACallSiteIsInternedAndCallerWaitsIsAFlag) {
  auto r = allreduce();
  CHECK(api::buildEntry(r)->call_site == nullptr && !api::buildEntry(r)->caller_waits);
  r.call_site_file = "train.py";
  r.call_site_line = 42;
  r.call_site_function = "step";
  r.flags = HVDLITE_REQUEST_CALLER_WAITS;
  core::CallSiteTable sites;
  auto e = api::buildEntry(r, &sites);
  CHECK(e->caller_waits);
  CHECK(e->call_site && e->call_site->text() == "train.py:42 in step()");
  CHECK(api::buildEntry(r, &sites)->call_site == e->call_site);  // one copy per site
  CHECK(api::buildEntry(r)->call_site == nullptr);                // no table: the binding sets its own
  CHECK(sites.intern(core::CallSite{"train.py", 42, "step"}) == e->call_site);  // either way in
  r.call_site_line = 43;
  CHECK(api::buildEntry(r, &sites)->call_site != e->call_site);  // another line, another site
  r.call_site_line = 42;
  r.call_site_function = nullptr;
  CHECK_EQ(api::buildEntry(r, &sites)->call_site->text(), std::string("train.py:42"));
}

TEST(RemoveProcessSetNamesItsSetInItsOwnField) {
  auto r = hvdlite_request_defaults();
  r.op = HVDLITE_OP_REMOVE_PROCESS_SET;
  r.name = "__remove_process_set.0";
  r.removed_process_set_id = 2;
  auto e = api::buildEntry(r);
  CHECK_EQ(e->removed_process_set_id, 2);
  CHECK_EQ(e->root_rank, 0);
  r.removed_process_set_id = 0;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "process set 0 cannot be removed");
}

TEST(BadCodesAreRefusedNamingTensorAndValue) {
  auto r = allreduce();
  r.op = 99;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument,
               "request 'grad/w': unknown op code 99; use one of 0 (allreduce)");
  r.op = -1;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "unknown op code -1");
  r = allreduce();
  r.dtype = 42;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "allreduce of 'grad/w': unknown dtype code 42");
  r = allreduce();
  r.reduce_op = 99;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "unknown reduce op code 99; use one of 0 (sum)");
  // The core's internal bit-AND is not a code a binding may ask for.
  r.reduce_op = static_cast<int32_t>(ReduceOp::kBitAnd);
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "unknown reduce op code 6");
  r = allreduce();
  r.flags = 0x80;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "unknown flags 128");
}

TEST(BadStructureIsRefused) {
  auto r = allreduce(nullptr);
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "has no tensor name");
  r = allreduce("");
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "the tensor name is empty");
  r = allreduce();
  r.ndim = -1;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "shape: negative length -1");
  r = allreduce();
  r.shape = nullptr;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "shape is NULL but its length is 2");
  r = allreduce();
  r.num_splits = -3;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "splits: negative length -3");
  r = allreduce();
  r.num_process_set_ranks = 2;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "process set ranks is NULL");
  r = allreduce();
  r.process_set_id = -1;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "process set id -1 is negative");
  r = allreduce();
  r.device = -2;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "device -2 is not a device");
  r = allreduce();
  r.root_rank = -1;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "root_rank -1 is negative");
  r = allreduce();
  r.prescale = std::nan("");
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "prescale factor nan is not a finite number");
  r = allreduce();
  r.group_size = 3;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "a group needs a name and a size >= 1");
  r = allreduce();
  r.group = "g";
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "group 'g' with group size 0");
  r = allreduce();
  r.input = nullptr;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "input is NULL for a tensor of shape [2, 3]");
  r = allreduce();
  r.output = nullptr;
  CHECK_THROWS(api::buildEntry(r), InvalidArgument, "output is NULL");
  r.op = HVDLITE_OP_ALLGATHER;  // allocated by the core: no output to give
  CHECK(api::buildEntry(r) != nullptr);
}

// Note [Codes defined once]: the static_asserts in request.cc tie the values;
// this ties the names, so that a code appended to one list in another place
// than the other is caught.
TEST(ApiCodesNameWhatTypesHNames) {
#define CHECK_NAME(name_of, Code, name, value) \
  CHECK_EQ(lower(#name), std::string(name_of(static_cast<Code>(value))));
#define CHECK_OP(name, value) CHECK_NAME(opTypeName, OpType, name, value)
#define CHECK_REDUCE(name, value) CHECK_NAME(reduceOpName, ReduceOp, name, value)
#define CHECK_DTYPE(name, value) CHECK_NAME(dtypeName, DataType, name, value)
  HVDLITE_OP_TYPES(CHECK_OP)
  HVDLITE_REDUCE_OPS(CHECK_REDUCE)
  HVDLITE_DTYPES(CHECK_DTYPE)
#undef CHECK_OP
#undef CHECK_REDUCE
#undef CHECK_DTYPE
#undef CHECK_NAME
}

using testing::Done;
using testing::onDone;

TEST(CApiRefusesBadRequestsInTheCallersThreadAndGoesOn) {
  Done done;
  char error[256] = "";
  CHECK_EQ(hvdlite_enqueue(nullptr, nullptr, onDone, &done, error, sizeof(error)),
           static_cast<int32_t>(HVDLITE_INVALID_ARGUMENT));
  CHECK(std::string(error).find("the request is NULL") != std::string::npos);
  api::session().init({}, {});  // one rank
  auto bad = allreduce();
  bad.reduce_op = 77;
  CHECK_EQ(hvdlite_enqueue(&bad, nullptr, onDone, &done, error, sizeof(error)),
           static_cast<int32_t>(HVDLITE_INVALID_ARGUMENT));
  CHECK(std::string(error).find("allreduce of 'grad/w': unknown reduce op code 77") !=
        std::string::npos);
  bad = allreduce();
  bad.op = 12;
  // Truncated to the buffer, still terminated.
  char small[16];
  CHECK_EQ(hvdlite_enqueue(&bad, nullptr, onDone, &done, small, sizeof(small)),
           static_cast<int32_t>(HVDLITE_INVALID_ARGUMENT));
  CHECK_EQ(std::string(small), std::string("request 'grad/w"));
  auto good = allreduce();
  CHECK_EQ(hvdlite_enqueue(&good, nullptr, nullptr, nullptr, error, sizeof(error)),
           static_cast<int32_t>(HVDLITE_INVALID_ARGUMENT));  // no done callback
  CHECK_EQ(hvdlite_enqueue(&good, nullptr, onDone, &done, error, sizeof(error)), 0);
  for (int i = 0; i < 5000 && done.calls == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK_EQ(done.calls.load(), 1);  // the refused ones never called back
  CHECK_EQ(done.status.load(), static_cast<int>(HVDLITE_OK));
  CHECK_EQ(kData[5], 6.0f);  // a sum over one rank
  api::session().shutdown();
}

int main() { return RUN_ALL_TESTS(); }
