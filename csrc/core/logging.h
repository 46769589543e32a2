// Messages for people, on stderr, prefixed with the rank. HVDLITE_LOG_LEVEL
// (trace, debug, info, warning, error; default warning) filters them.
#pragma once

#include <string>

namespace hvdlite::core {

enum class LogLevel { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4 };

void setLogLevel(LogLevel level);
LogLevel parseLogLevel(const std::string& name);  // InvalidArgument on an unknown name
void log(LogLevel level, int rank, const std::string& message);
inline void logWarning(int rank, const std::string& message) { log(LogLevel::kWarning, rank, message); }
inline void logDebug(int rank, const std::string& message) { log(LogLevel::kDebug, rank, message); }

}  // namespace hvdlite::core
