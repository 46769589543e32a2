// Messages for people, on stderr, in Horovod's layout:
//   [2026-05-04 12:00:00.123456: I hvdlite rank 1] topology: ...
// HVDLITE_LOG_LEVEL (or HOROVOD_LOG_LEVEL: trace, debug, info, warning,
// error, fatal; default warning) filters them; HVDLITE_LOG_HIDE_TIME=1 (or
// HOROVOD_LOG_HIDE_TIME) drops the time stamp. Every layer may log.
//
// Note [Free when filtered]
// A message below the level must cost nothing on the hot path, so code logs
// through HVD_LOG, which tests the level (one relaxed atomic load) before it
// evaluates or formats any argument. Call log() directly only where the
// message is built anyway.
#pragma once

#include <atomic>
#include <string>

#include "common/errors.h"

namespace hvdlite {

enum class LogLevel { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kFatal = 5 };

namespace detail {
extern std::atomic<int> g_log_level;
}  // namespace detail

inline bool logEnabled(LogLevel level) {
  return static_cast<int>(level) >= detail::g_log_level.load(std::memory_order_relaxed);
}

void setLogLevel(LogLevel level);
void setLogTime(bool show);  // false: HVDLITE_LOG_HIDE_TIME
LogLevel parseLogLevel(const std::string& name);  // InvalidArgument on an unknown name
void log(LogLevel level, int rank, const std::string& message);
inline void logWarning(int rank, const std::string& message) { log(LogLevel::kWarning, rank, message); }

}  // namespace hvdlite

// HVD_LOG(kInfo, rank, "a", 1, "b"): formats and writes only when kInfo passes
// the level (Note [Free when filtered]).
#define HVD_LOG(level, rank, ...)                                                              \
  do {                                                                                         \
    if (::hvdlite::logEnabled(::hvdlite::LogLevel::level)) {                                   \
      ::hvdlite::log(::hvdlite::LogLevel::level, (rank), ::hvdlite::detail::concat(__VA_ARGS__)); \
    }                                                                                          \
  } while (0)
