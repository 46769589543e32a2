#include "core/autotuner.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "common/errors.h"
#include "core/fusion.h"

namespace hvdlite::core {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

int64_t bytesMoved(const Response& r) {
  if (r.error) return 0;
  int64_t bytes = responseBytes(r);
  if (r.op == OpType::kAllgather || r.op == OpType::kAlltoall) {
    // Their shape says one rank's part; count the rows every rank sends.
    int64_t first = r.shape.empty() ? 1 : r.shape[0];
    int64_t rows = 0;
    for (int64_t n : r.per_rank) rows += n;
    if (first > 0) bytes = bytes / first * rows;
  }
  return bytes;
}

}  // namespace

std::string serializeParameters(const TunedParameters& p) {
  std::ostringstream out;
  out.precision(17);
  out << p.fusion_threshold << ' ' << p.cycle_time_ms << ' ' << (p.final ? 1 : 0);
  return out.str();
}

TunedParameters parseParameters(const std::string& bytes) {
  std::istringstream in(bytes);
  TunedParameters p;
  int final = 0;
  // Rank 0's numbers size the fusion buffer and time every cycle: a
  // negative threshold, or a cycle time that is not a number of milliseconds
  // from 0 to an hour, comes from a broken or hostile rank 0.
  if (!(in >> p.fusion_threshold >> p.cycle_time_ms >> final) || p.fusion_threshold < 0 ||
      !(p.cycle_time_ms >= 0 && p.cycle_time_ms <= 3.6e6)) {
    throw TransportError("autotune: malformed parameters from rank 0: '" + bytes + "'");
  }
  p.final = final != 0;
  return p;
}

Autotuner::Autotuner(const TunedParameters& initial, const AutotuneOptions& options,
                     const std::string& log_path)
    : options_(options), current_(initial) {
  current_.final = false;
  if (!log_path.empty()) {
    log_.open(log_path, std::ios::out | std::ios::trunc);
    if (!log_) {
      throw InvalidArgument("HVDLITE_AUTOTUNE_LOG='" + log_path +
                            "' cannot be opened for writing; give a path in a writable directory");
    }
    log_ << "sample,phase,fusion_threshold_bytes,cycle_time_ms,steps,bytes,seconds,"
            "score_bytes_per_second,discarded\n";
    log_.flush();
  }
  if (options_.warmup_samples <= 0) startPhase(Phase::kFusion);
}

std::optional<TunedParameters> Autotuner::record(const std::vector<Response>& executed,
                                                 Clock::time_point now) {
  if (phase_ == Phase::kDone) return std::nullopt;
  if (!started_) {
    // The first window starts when the first work is seen, not at init.
    if (executed.empty()) return std::nullopt;
    started_ = true;
    window_start_ = now;
  }
  for (const auto& r : executed) {
    if (!seen_.insert(r.name).second) {
      ++steps_;
      seen_.clear();
      seen_.insert(r.name);
    }
    bytes_ += bytesMoved(r);
  }
  double seconds = std::chrono::duration<double>(now - window_start_).count();
  bool full = steps_ >= options_.steps_per_sample;
  bool too_long = seconds >= options_.max_sample.count() && bytes_ > 0;
  if (!full && !too_long) return std::nullopt;
  auto change = finishWindow(seconds);
  window_start_ = now;
  steps_ = 0;
  bytes_ = 0;
  return change;
}

std::optional<TunedParameters> Autotuner::finishWindow(double seconds) {
  double score = seconds > 0 ? static_cast<double>(bytes_) / seconds : 0.0;
  bool discarded = phase_ == Phase::kWarmup || discard_next_;
  logWindow(steps_, bytes_, seconds, score, discarded);
  ++sample_;
  if (phase_ == Phase::kWarmup) {
    if (++windows_ < options_.warmup_samples) return std::nullopt;
    return startPhase(Phase::kFusion);
  }
  if (discard_next_) {
    discard_next_ = false;
    return std::nullopt;
  }
  candidates_[candidate_].scores.push_back(score);
  if (static_cast<int>(candidates_[candidate_].scores.size()) < options_.samples_per_candidate) {
    return std::nullopt;
  }
  return advance();
}

// The next candidate of this phase, or the next phase once all are scored.
std::optional<TunedParameters> Autotuner::advance() {
  if (++candidate_ < candidates_.size()) {
    const TunedParameters& next = candidates_[candidate_].parameters;
    if (next == current_) return std::nullopt;
    current_ = next;
    discard_next_ = true;
    return current_;
  }
  return startPhase(phase_ == Phase::kFusion ? Phase::kCycle : Phase::kDone);
}

std::optional<TunedParameters> Autotuner::startPhase(Phase phase) {
  TunedParameters best = current_;
  double best_score = 0;
  if (!candidates_.empty()) {
    auto winner = std::max_element(candidates_.begin(), candidates_.end(),
                                   [](const Candidate& a, const Candidate& b) {
                                     return median(a.scores) < median(b.scores);
                                   });
    best = winner->parameters;
    best_score = median(winner->scores);
  }
  phase_ = phase;
  candidates_.clear();
  candidate_ = 0;
  windows_ = 0;
  if (phase == Phase::kDone) {
    current_ = best;
    current_.final = true;
    logWindow(0, 0, 0, best_score, false);
    return current_;  // always: every rank learns that the search is over
  }
  if (phase == Phase::kFusion) {
    std::vector<int64_t> values = options_.fusion_candidates;
    values.push_back(best.fusion_threshold);
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    for (int64_t v : values) candidates_.push_back({{v, best.cycle_time_ms, false}, {}});
  } else {
    std::vector<double> values = options_.cycle_candidates;
    values.push_back(best.cycle_time_ms);
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    for (double v : values) candidates_.push_back({{best.fusion_threshold, v, false}, {}});
  }
  const TunedParameters& first = candidates_.front().parameters;
  if (first == current_) return std::nullopt;
  current_ = first;
  discard_next_ = true;
  return current_;
}

const char* Autotuner::phaseName() const {
  switch (phase_) {
    case Phase::kWarmup: return "warmup";
    case Phase::kFusion: return "fusion_threshold";
    case Phase::kCycle: return "cycle_time";
    case Phase::kDone: return "best";
  }
  return "?";
}

void Autotuner::logWindow(int steps, int64_t bytes, double seconds, double score, bool discarded) {
  if (!log_.is_open()) return;
  char line[256];
  std::snprintf(line, sizeof(line), "%d,%s,%lld,%g,%d,%lld,%.6f,%.1f,%d\n", sample_, phaseName(),
                static_cast<long long>(current_.fusion_threshold), current_.cycle_time_ms, steps,
                static_cast<long long>(bytes), seconds, score, discarded ? 1 : 0);
  log_ << line;
  log_.flush();
}

}  // namespace hvdlite::core
