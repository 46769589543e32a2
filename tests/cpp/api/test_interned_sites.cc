// hvdlite_intern_call_site and hvdlite_enqueue_at (api.h): a binding that
// queues requests from the same call sites every step interns each site once
// (Note [Sites interned once] in jax/collective_call.cc). The site it gets is
// the table's one copy, another line is another site, and it outlives a
// shutdown() and init(); a request queued with it completes like any other.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "api/api.h"
#include "api/sample_request.h"
#include "api/session.h"
#include "core/call_site.h"
#include "testing.h"

using namespace hvdlite;

namespace {

using testing::Done;
using testing::onDone;

void waitFor(const Done& done, int calls) {
  for (int i = 0; i < 5000 && done.calls < calls; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

TEST(AnInternedSiteIsTheTablesOneCopyForTheLifeOfTheProcess) {
  CHECK(hvdlite_intern_call_site(nullptr, 3, "f") == nullptr);
  CHECK(hvdlite_intern_call_site("", 3, "f") == nullptr);
  const void* site = hvdlite_intern_call_site("step.py", 12, "train_step");
  CHECK(site != nullptr);
  CHECK(static_cast<const core::CallSite*>(site)->text() == "step.py:12 in train_step()");
  CHECK(hvdlite_intern_call_site("step.py", 12, "train_step") == site);
  CHECK(api::session().callSites().intern("step.py", 12, "train_step") == site);
  CHECK(hvdlite_intern_call_site("step.py", 13, "train_step") != site);
  CHECK(hvdlite_intern_call_site("step.py", 12, nullptr) != site);  // no function: another site
  api::session().init({}, {});  // one rank
  api::session().shutdown();
  CHECK(hvdlite_intern_call_site("step.py", 12, "train_step") == site);
}

TEST(ARequestQueuedAtAnInternedSiteCompletes) {
  float data[6] = {1, 2, 3, 4, 5, 6};
  api::session().init({}, {});  // one rank
  const void* site = hvdlite_intern_call_site("step.py", 20, "train_step");
  Done done;
  char error[256] = "";
  auto request = testing::sampleAllreduce("grad/at_site", data);
  CHECK_EQ(hvdlite_enqueue_at(&request, site, nullptr, onDone, &done, error, sizeof(error)), 0);
  auto plain = testing::sampleAllreduce("grad/no_site", data);
  CHECK_EQ(hvdlite_enqueue_at(&plain, nullptr, nullptr, onDone, &done, error, sizeof(error)), 0);
  waitFor(done, 2);
  CHECK_EQ(done.calls.load(), 2);
  CHECK_EQ(done.status.load(), static_cast<int>(HVDLITE_OK));
  CHECK_EQ(data[5], 6.0f);  // a sum over one rank
  api::session().shutdown();
}

int main() { return RUN_ALL_TESTS(); }
