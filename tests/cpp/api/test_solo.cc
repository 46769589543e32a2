// Note [Solo collectives] in api/solo.h: while the Session is solo, a
// collective completes at once on this rank, as in a job of one rank, or is
// refused with the solo mode's words; nothing is queued in the runtime.
#include <atomic>
#include <memory>
#include <string>

#include "api/api.h"
#include "api/sample_request.h"
#include "api/session.h"
#include "common/errors.h"
#include "core/status.h"
#include "testing.h"

using namespace hvdlite;

namespace {

using testing::sampleAllreduce;

const char* kWho = "worker w9 (rank 0 of 1), which joined round 3 of a running elastic job,";

struct Outcome {
  std::atomic<int> calls{0};
  int kind = -1;
  int32_t value = -1;
};

api::Completion recording(Outcome* outcome) {
  api::Completion completion;
  completion.callback = [outcome](core::TensorEntry& entry, const core::Status& status) {
    outcome->kind = static_cast<int>(status.kind);
    outcome->value = entry.result_value;
    ++outcome->calls;
  };
  return completion;
}

// The message of the refusal of `request`, "" if it was accepted.
std::string refusal(const hvdlite_request& request, Outcome* outcome) {
  try {
    api::session().submit(request, recording(outcome));
  } catch (const core::StatusError& e) {
    CHECK(e.status().kind == core::StatusKind::kOutsideRun);  // CollectiveOutsideRunError in Python
    return e.what();
  }
  return "";
}

void beginSolo() { api::session().solo().begin(kWho, "It is harmless.", "Move it into run()."); }

}  // namespace

TEST(AloneAnAllreduceIsTheRanksOwnScaledValuesCompletedBeforeSubmitReturns) {
  api::session().init({}, {});
  beginSolo();
  float data[6] = {1, 2, 3, 4, 5, 6};
  auto request = sampleAllreduce("grad/w", data);
  request.prescale = 2.0;
  request.postscale = 0.5;
  request.reduce_op = HVDLITE_REDUCE_AVERAGE;
  Outcome outcome;
  api::session().submit(request, recording(&outcome));
  CHECK_EQ(outcome.calls.load(), 1);  // on this thread, before submit returned
  CHECK_EQ(outcome.kind, static_cast<int>(core::StatusKind::kOk));
  CHECK_EQ(data[5], 6.0f);  // 6 x 2 / 1 rank x 0.5

  float out[6] = {};
  auto broadcast = sampleAllreduce("weights", data);
  broadcast.op = HVDLITE_OP_BROADCAST;
  broadcast.output = out;
  Outcome broadcasted;
  api::session().submit(broadcast, recording(&broadcasted));
  CHECK_EQ(out[2], 3.0f);  // its own tensor, whatever the root

  auto join = sampleAllreduce("join", data);
  join.op = HVDLITE_OP_JOIN;
  Outcome joined;
  api::session().submit(join, recording(&joined));
  CHECK_EQ(joined.value, 0);  // the last (only) rank to join
  api::session().solo().end();
  api::session().shutdown();
}

TEST(AloneACollectiveWhoseResultDependsOnTheJobIsRefusedNamingWhoWhatAndWhy) {
  api::session().init({}, {});
  beginSolo();
  float data[6] = {};
  Outcome outcome;
  for (int op : {HVDLITE_OP_ALLGATHER, HVDLITE_OP_ALLTOALL, HVDLITE_OP_REDUCESCATTER}) {
    auto request = sampleAllreduce("rows", data);
    request.op = op;
    request.output = nullptr;
    const std::string message = refusal(request, &outcome);
    CHECK(message.rfind(kWho, 0) == 0);
    CHECK(message.find("before entering hvd.elastic.run") != std::string::npos);
    CHECK(message.find("its result depends on the job's size") != std::string::npos);
    CHECK(message.find("Move it into run().") != std::string::npos);
  }
  // The C API (TF kernels, JAX's handler) is refused alike.
  auto gather = sampleAllreduce("rows", data);
  gather.op = HVDLITE_OP_ALLGATHER;
  char error[1024] = "";
  auto done = [](void*, const hvdlite_result*) {};
  CHECK_EQ(hvdlite_enqueue(&gather, nullptr, done, nullptr, error, sizeof(error)), HVDLITE_OUTSIDE_RUN_ERROR);
  CHECK(std::string(error).rfind(kWho, 0) == 0);
  CHECK_EQ(outcome.calls.load(), 0);  // refused: never called back
  api::session().solo().end();
  api::session().shutdown();
}

TEST(AloneOnAGpuAnUnscaledResultCompletesAndAScaledOneIsRefused) {
  // (The copy of an out-of-place result runs on the fake GPU:
  // tests/elastic/test_late_joiners.py.)
  api::session().init({}, {});
  beginSolo();
  float data[6] = {};
  float other[6] = {};
  auto in_place = sampleAllreduce("grad/w", data);
  in_place.device = 0;
  Outcome outcome;
  api::session().submit(in_place, recording(&outcome));  // no CUDA call needed: identity
  CHECK_EQ(outcome.calls.load(), 1);
  auto scaled = in_place;
  scaled.postscale = 0.5;
  CHECK(refusal(scaled, &outcome).find("it is on a GPU with scale factors") != std::string::npos);
  auto elsewhere = in_place;
  elsewhere.output = other;
  elsewhere.ready_event = &other;  // any event: refused before it is used
  CHECK(refusal(elsewhere, &outcome).find("written on another stream") != std::string::npos);
  api::session().solo().end();
  api::session().shutdown();
}

TEST(AfterSoloEndsCollectivesGoToTheJobAgain) {
  api::session().init({}, {});
  beginSolo();
  api::session().solo().end();
  CHECK(!api::session().solo().active());
  float data[6] = {1, 2, 3, 4, 5, 6};
  auto gather = sampleAllreduce("rows", data);
  gather.op = HVDLITE_OP_ALLGATHER;
  gather.output = nullptr;
  auto handle = std::make_shared<api::Handle>();
  api::session().submit(gather, {handle, {}, {}});
  CHECK(api::session().wait(*handle));
  CHECK(handle->status.ok());
  api::session().shutdown();
}

int main() { return RUN_ALL_TESTS(); }
