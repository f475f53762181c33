#pragma once

#include <sstream>
#include <string>

#include "common/env.h"
#include "common/status.h"

namespace detcoll {

enum class LogLevel : int { kNone = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4, kTrace = 5 };

// Case-insensitive NONE, ERROR, WARN, INFO, DEBUG, TRACE.
bool parseLogLevel(const std::string& text, LogLevel* level);
// DETCOLL_LOG_LEVEL (WARN when unset).
Status loadLogLevel(Environment& env, LogLevel* level);
const char* logLevelName(LogLevel level);

void setLogLevel(LogLevel level);
LogLevel logLevel();
bool logEnabled(LogLevel level);
// The rank shown in the prefix; -1 (the default) shows "[-]".
void setLogRank(int rank);

// Writes one line to stderr: "host:pid:tid [rank] DETCOLL LEVEL message".
void logMessage(LogLevel level, const std::string& message);
// The prefix alone, exposed for tests.
std::string logPrefix(LogLevel level);

class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine() { logMessage(level_, stream_.str()); }
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  template <typename T>
  LogLine& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace detcoll

// DETCOLL_LOG(kInfo) << "text " << value;  (the stream is not evaluated when the level is off)
#define DETCOLL_LOG(level)                                  \
  if (!::detcoll::logEnabled(::detcoll::LogLevel::level)) { \
  } else                                                    \
    ::detcoll::LogLine(::detcoll::LogLevel::level)
