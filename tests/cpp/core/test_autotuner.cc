// The autotuner's search on a simulated job whose step time depends on the
// parameters: it must visit the candidates, settle on the fastest pair, and
// log every window.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "common/errors.h"
#include "core/autotuner.h"
#include "testing.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

constexpr int64_t kMiB = 1 << 20;

std::vector<Response> stepResponses() {
  std::vector<Response> out;
  for (const char* name : {"grad/a", "grad/b"}) {
    Response r;
    r.name = name;
    r.shape = {kMiB / 4};  // 1 MiB of float32
    out.push_back(r);
  }
  return out;
}

// A job that is fastest at a 16 MiB threshold and a 2.5 ms cycle.
std::chrono::microseconds stepTime(const TunedParameters& p) {
  int64_t us = 10000;
  us += p.fusion_threshold == 16 * kMiB ? 0 : 3000;
  us += p.cycle_time_ms == 2.5 ? 0 : 1000;
  return std::chrono::microseconds(us);
}

struct Run {
  TunedParameters applied;
  int changes = 0;
  int steps = 0;
};

// Drives the tuner the way the runtime does: a change takes effect in the
// next step, on every rank at once.
Run simulate(Autotuner& tuner, TunedParameters start, int max_steps) {
  Run run{start};
  auto now = Clock::time_point{};
  while (run.steps < max_steps && !run.applied.final) {
    now += stepTime(run.applied);
    ++run.steps;
    auto change = tuner.record(stepResponses(), now);
    if (change) {
      run.applied = *change;
      ++run.changes;
    }
  }
  return run;
}

std::vector<std::string> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST(ParametersSurviveSerialization) {
  TunedParameters p{16 * kMiB, 2.5, true};
  CHECK(parseParameters(serializeParameters(p)) == p);
  CHECK_THROWS(parseParameters("garbage"), TransportError, "malformed parameters");
}

TEST(SearchSettlesOnTheFastestPairAndLogsEveryWindow) {
  std::string log = "/tmp/hvdlite_test_autotune_" + std::to_string(::getpid()) + ".csv";
  AutotuneOptions options;
  options.warmup_samples = 2;
  options.steps_per_sample = 3;
  options.samples_per_candidate = 2;
  TunedParameters start{128 * kMiB, 1.0, false};
  Autotuner tuner(start, options, log);
  Run run = simulate(tuner, start, 10000);
  CHECK(run.applied.final);
  CHECK(tuner.done());
  CHECK_EQ(run.applied.fusion_threshold, 16 * kMiB);
  CHECK_EQ(run.applied.cycle_time_ms, 2.5);
  CHECK(tuner.current() == run.applied);
  // 5 fusion candidates, then 5 cycle candidates (1.0 is the start value).
  CHECK(run.changes >= 9);
  auto rows = lines(log);
  std::remove(log.c_str());
  CHECK(rows.size() > 20);
  CHECK_EQ(rows[0], std::string("sample,phase,fusion_threshold_bytes,cycle_time_ms,steps,bytes,"
                                "seconds,score_bytes_per_second,discarded"));
  CHECK(rows[1].find(",warmup,134217728,1,") != std::string::npos);
  CHECK(rows.back().find(",best,16777216,2.5,") != std::string::npos);
  bool saw_fusion = false, saw_cycle = false;
  for (const auto& row : rows) {
    saw_fusion |= row.find(",fusion_threshold,4194304,1,3,") != std::string::npos;
    saw_cycle |= row.find(",cycle_time,16777216,5,3,") != std::string::npos;
  }
  CHECK(saw_fusion);
  CHECK(saw_cycle);
  // Once done, the tuner stays quiet.
  CHECK(!tuner.record(stepResponses(), Clock::time_point{} + std::chrono::hours(1)));
}

TEST(StepsAreCountedByNamesComingRound) {
  AutotuneOptions options;
  options.warmup_samples = 1;
  options.steps_per_sample = 4;
  Autotuner tuner({64 * kMiB, 1.0, false}, options, "");
  auto now = Clock::time_point{};
  // One tensor per cycle, two per step: a window is 4 steps = 8 cycles (plus
  // the first name that closes it).
  int cycles = 0;
  std::optional<TunedParameters> change;
  for (; cycles < 100 && !change; ++cycles) {
    Response r;
    r.name = cycles % 2 ? "b" : "a";
    r.shape = {256};
    now += std::chrono::milliseconds(1);
    change = tuner.record({r}, now);
  }
  CHECK(change.has_value());
  CHECK_EQ(cycles, 9);
  CHECK_EQ(change->fusion_threshold, int64_t{kMiB});
}

TEST(UnwritableLogIsAnInvalidArgument) {
  CHECK_THROWS(Autotuner({kMiB, 1.0, false}, AutotuneOptions{}, "/nonexistent-dir/x.csv"),
               InvalidArgument, "HVDLITE_AUTOTUNE_LOG");
}

int main() { return RUN_ALL_TESTS(); }
