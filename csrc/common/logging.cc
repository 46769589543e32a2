#include "common/logging.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace hvdlite {
namespace detail {
// With the time switch below, the only mutable file-level state of the
// library: set from Config at init, and logging works before and after a
// Runtime exists.
std::atomic<int> g_log_level{static_cast<int>(LogLevel::kWarning)};
}  // namespace detail

namespace {
std::atomic<bool> g_show_time{true};
const char* kNames[] = {"trace", "debug", "info", "warning", "error", "fatal"};
const char kLetters[] = "TDIWEF";  // Horovod's

// "2026-05-04 12:00:00.123456", local time, as Horovod writes it.
std::string timestamp() {
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm local{};
  localtime_r(&seconds, &local);
  char text[40];
  size_t n = std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  std::snprintf(text + n, sizeof(text) - n, ".%06lld", static_cast<long long>(micros));
  return text;
}
}  // namespace

void setLogLevel(LogLevel level) { detail::g_log_level = static_cast<int>(level); }
void setLogTime(bool show) { g_show_time = show; }

LogLevel parseLogLevel(const std::string& name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (int i = 0; i < 6; ++i) {
    if (lower == kNames[i]) return static_cast<LogLevel>(i);
  }
  if (lower == "warn") return LogLevel::kWarning;
  throw InvalidArgument("HVDLITE_LOG_LEVEL='" + name +
                        "' is not a log level; use trace, debug, info, warning, error or fatal");
}

void log(LogLevel level, int rank, const std::string& message) {
  if (!logEnabled(level)) return;
  char letter = kLetters[static_cast<int>(level)];
  // One fprintf per message, so that threads' lines never interleave.
  if (g_show_time) {
    std::fprintf(stderr, "[%s: %c hvdlite rank %d] %s\n", timestamp().c_str(), letter, rank, message.c_str());
  } else {
    std::fprintf(stderr, "[%c hvdlite rank %d] %s\n", letter, rank, message.c_str());
  }
  std::fflush(stderr);
}

}  // namespace hvdlite
