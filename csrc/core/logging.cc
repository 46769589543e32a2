#include "core/logging.h"

#include <atomic>
#include <cctype>
#include <cstdio>

#include "common/errors.h"

namespace hvdlite::core {
namespace {
// The only mutable file-level state in the core: a level filter, set from
// Config at init. Logging must work before and after a Runtime exists.
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
const char* kNames[] = {"trace", "debug", "info", "warning", "error"};
}  // namespace

void setLogLevel(LogLevel level) { g_level = static_cast<int>(level); }

LogLevel parseLogLevel(const std::string& name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (int i = 0; i < 5; ++i) {
    if (lower == kNames[i]) return static_cast<LogLevel>(i);
  }
  if (lower == "warn") return LogLevel::kWarning;
  if (lower == "fatal") return LogLevel::kError;
  throw InvalidArgument("HVDLITE_LOG_LEVEL='" + name +
                        "' is not a log level; use trace, debug, info, warning or error");
}

void log(LogLevel level, int rank, const std::string& message) {
  if (static_cast<int>(level) < g_level.load()) return;
  std::fprintf(stderr, "[hvdlite %s rank %d] %s\n", kNames[static_cast<int>(level)], rank,
               message.c_str());
  std::fflush(stderr);
}

}  // namespace hvdlite::core
