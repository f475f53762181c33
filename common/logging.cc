#include "common/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdio>

namespace detcoll {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
std::atomic<int> g_rank{-1};

std::string hostName() {
  char buffer[256] = {0};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) return "unknown";
  return buffer;
}

}  // namespace

bool parseLogLevel(const std::string& text, LogLevel* level) {
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (LogLevel l : {LogLevel::kNone, LogLevel::kError, LogLevel::kWarn, LogLevel::kInfo,
                     LogLevel::kDebug, LogLevel::kTrace}) {
    if (upper == logLevelName(l)) {
      *level = l;
      return true;
    }
  }
  return false;
}

Status loadLogLevel(Environment& env, LogLevel* level) {
  LogLevel result = LogLevel::kWarn;
  const char* used = nullptr;
  if (const char* v = env.get("DETCOLL_LOG_LEVEL", nullptr, &used)) {
    if (!parseLogLevel(v, &result)) {
      return invalidValue(used, v, "NONE, ERROR, WARN, INFO, DEBUG or TRACE");
    }
  }
  *level = result;
  return Status::ok();
}

const char* logLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kNone:
      return "NONE";
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kTrace:
      return "TRACE";
  }
  return "UNKNOWN";
}

void setLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level));
}
LogLevel logLevel() {
  return static_cast<LogLevel>(g_level.load());
}
bool logEnabled(LogLevel level) {
  return level != LogLevel::kNone &&
         static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}
void setLogRank(int rank) {
  g_rank.store(rank);
}

std::string logPrefix(LogLevel level) {
  static const std::string host = hostName();
  const int rank = g_rank.load();
  std::string text = host + ":" + std::to_string(getpid()) + ":" +
                     std::to_string(static_cast<long>(syscall(SYS_gettid))) + " [" +
                     (rank < 0 ? std::string("-") : std::to_string(rank)) + "] DETCOLL " +
                     logLevelName(level) + " ";
  return text;
}

void logMessage(LogLevel level, const std::string& message) {
  const std::string line = logPrefix(level) + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace detcoll
