// HVDLITE_AUTOTUNE=1: searches the fusion threshold and the cycle time while
// the job trains, scored by the bytes the collectives move per second.
// Rank 0 owns the search; the runtime broadcasts each change so that every
// rank switches in the same cycle (fusion plans must agree across ranks).
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/message.h"
#include "core/tensor_queue.h"

namespace hvdlite::core {

struct TunedParameters {
  int64_t fusion_threshold = 0;
  double cycle_time_ms = 0;
  bool final = false;  // the search is over; these are the values it kept

  bool operator==(const TunedParameters& o) const {
    return fusion_threshold == o.fusion_threshold && cycle_time_ms == o.cycle_time_ms &&
           final == o.final;
  }
};

std::string serializeParameters(const TunedParameters& parameters);
TunedParameters parseParameters(const std::string& bytes);  // TransportError if malformed

struct AutotuneOptions {
  int warmup_samples = 3;         // samples discarded at the start (allocation, JIT, caches)
  int steps_per_sample = 10;      // training steps per scored window
  int samples_per_candidate = 2;  // scored windows per candidate; the median counts
  std::chrono::duration<double> max_sample{5.0};  // a window ends after this even mid-step
  std::vector<int64_t> fusion_candidates{1 << 20, 4 << 20, 16 << 20, 64 << 20, 128 << 20};
  std::vector<double> cycle_candidates{0.5, 1.0, 2.5, 5.0};
};

// Note [Autotune search]
// Horovod's autotuner fits a Gaussian process to (parameters -> score) and
// samples where it expects improvement. Two knobs with a handful of sensible
// values each do not need that: a coordinate search visits every fusion
// threshold candidate (cycle time fixed at its start value), keeps the best,
// then every cycle-time candidate with that threshold, and settles on the
// best pair: 9 candidates, each scored by the median of a few windows, so one
// noisy window (the scheduler's 4 ms tick) cannot pick the winner.
// A window is `steps_per_sample` training steps; a step ends when a tensor
// name comes round again, so windows hold whole steps whatever the fusion
// does to the number of cycles. After every switch one window is thrown
// away: the switch lands mid-step. Scores are bytes per wall-clock second,
// compute included, which is what makes training faster.
// Not thread-safe: the background thread of rank 0 is its only user.
class Autotuner {
 public:
  // `log_path`: CSV of every window ("" = no log); truncated here.
  Autotuner(const TunedParameters& initial, const AutotuneOptions& options,
            const std::string& log_path);

  // After each cycle: what it executed and when it ended. Returns the
  // parameters every rank must switch to, when the search moves on.
  std::optional<TunedParameters> record(const std::vector<Response>& executed,
                                        Clock::time_point now);

  const TunedParameters& current() const { return current_; }
  bool done() const { return current_.final; }

 private:
  struct Candidate {
    TunedParameters parameters;
    std::vector<double> scores;
  };
  enum class Phase { kWarmup, kFusion, kCycle, kDone };

  std::optional<TunedParameters> finishWindow(double seconds);
  std::optional<TunedParameters> startPhase(Phase phase);
  std::optional<TunedParameters> advance();
  const char* phaseName() const;
  void logWindow(int steps, int64_t bytes, double seconds, double score, bool discarded);

  AutotuneOptions options_;
  TunedParameters current_;
  Phase phase_ = Phase::kWarmup;
  std::vector<Candidate> candidates_;  // of the current phase
  size_t candidate_ = 0;               // the one being scored
  int windows_ = 0;                    // windows seen in the current phase/candidate
  bool discard_next_ = false;          // the window after a switch

  std::unordered_set<std::string> seen_;  // names of the current step
  int steps_ = 0;
  int64_t bytes_ = 0;
  Clock::time_point window_start_{};
  bool started_ = false;
  int sample_ = 0;
  std::ofstream log_;
};

}  // namespace hvdlite::core
