// Handle::resetForReuse (Note [A reused handle for a synchronous collective]
// in python/bind_collectives.cc): a handle that completed, with a failure or
// with outputs the core allocated, comes back in a new handle's state, and
// completes again through the Session as a new one does.
#include <chrono>
#include <memory>
#include <string>

#include "api/api.h"
#include "api/sample_request.h"
#include "api/session.h"
#include "common/errors.h"
#include "testing.h"

using namespace hvdlite;

namespace {

// Every field against a new handle's.
void expectNew(api::Handle& h, const std::string& where) {
  const api::Handle fresh;
  const bool same = !h.isDone() && h.sleepers == 0 && !h.held_by_entry && h.status.ok() && h.status.message.empty() &&
                    !h.status.details && !h.output && !h.device_output && h.device == fresh.device && !h.done_event &&
                    h.stream == nullptr && h.output_shape.empty() && h.received_splits.empty() &&
                    h.value == fresh.value && h.op == fresh.op && h.name.empty() &&
                    h.wait_started == fresh.wait_started && h.next_report == fresh.next_report && !h.taken;
  if (!same) throw testing::Failure(where + ": the reset handle differs from a new one");
}

}  // namespace

TEST(AResetHandleIsANewOneAndCompletesAgain) {
  api::Session session;
  session.init({}, {});
  auto handle = std::make_shared<api::Handle>();
  float data[6] = {1, 2, 3, 4, 5, 6};

  auto gather = testing::sampleAllreduce("gather/w", data);
  gather.op = HVDLITE_OP_ALLGATHER;
  gather.output = nullptr;
  gather.flags = HVDLITE_REQUEST_NO_WAKE;
  session.submit(gather, {handle, {}, {}});
  CHECK(session.wait(*handle));
  CHECK(handle->output != nullptr && !handle->output_shape.empty() && handle->taken);
  handle->resetForReuse();
  expectNew(*handle, "after an allgather");

  // Completed by the background thread, or failed by the shutdown racing
  // with it: either way reset.
  auto request = testing::sampleAllreduce("grad/w", data);
  session.submit(request, {handle, {}, {}});
  session.shutdown();
  CHECK(session.wait(*handle, std::chrono::seconds(10)));
  handle->resetForReuse();
  expectNew(*handle, "after the shutdown");

  session.init({}, {});
  request.flags = HVDLITE_REQUEST_NO_WAKE;
  session.submit(request, {handle, {}, {}});
  CHECK(session.wait(*handle));
  CHECK(handle->status.ok());
  CHECK_EQ(handle->name, std::string("grad/w"));
  CHECK_EQ(data[5], 6.0f);
  handle->resetForReuse();
  session.submit(request, {handle, {}, {}});  // the same name: kept, not copied again
  CHECK(session.wait(*handle));
  CHECK(handle->status.ok() && handle->name == "grad/w");
  session.shutdown();
}

int main() { return RUN_ALL_TESTS(); }
