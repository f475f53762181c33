// common/logging.h: the NCCL-style prefix "host:pid:tid [rank] DETCOLL LEVEL " and level filtering.

#include "common/logging.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>
#include <thread>

namespace detcoll {
namespace {

std::string expectedPrefix(const std::string& rank, const std::string& level, long tid) {
  char host[256] = {0};
  EXPECT_EQ(gethostname(host, sizeof(host) - 1), 0);
  return std::string(host) + ":" + std::to_string(getpid()) + ":" + std::to_string(tid) + " [" +
         rank + "] DETCOLL " + level + " ";
}

long currentTid() {
  return static_cast<long>(syscall(SYS_gettid));
}

// Restores the process-wide log state after each test.
class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override { savedLevel_ = logLevel(); }
  void TearDown() override {
    setLogRank(-1);
    setLogLevel(savedLevel_);
  }

 private:
  LogLevel savedLevel_ = LogLevel::kWarn;
};

TEST_F(LoggingTest, PrefixHasHostPidTidRankAndLevel) {
  setLogRank(3);
  EXPECT_EQ(logPrefix(LogLevel::kWarn), expectedPrefix("3", "WARN", currentTid()));
  EXPECT_EQ(logPrefix(LogLevel::kInfo), expectedPrefix("3", "INFO", currentTid()));
  setLogRank(0);
  EXPECT_EQ(logPrefix(LogLevel::kError), expectedPrefix("0", "ERROR", currentTid()));
  setLogRank(-1);
  EXPECT_EQ(logPrefix(LogLevel::kDebug), expectedPrefix("-", "DEBUG", currentTid()));
}

TEST_F(LoggingTest, PrefixShowsTheCallingThread) {
  setLogRank(7);
  std::string fromThread;
  long threadTid = 0;
  std::thread worker([&] {
    threadTid = currentTid();
    fromThread = logPrefix(LogLevel::kTrace);
  });
  worker.join();
  EXPECT_NE(threadTid, currentTid());
  EXPECT_EQ(fromThread, expectedPrefix("7", "TRACE", threadTid));
}

TEST_F(LoggingTest, LogMessageWritesPrefixAndMessageToStderr) {
  setLogRank(2);
  ::testing::internal::CaptureStderr();
  logMessage(LogLevel::kInfo, "hello 42");
  const std::string written = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(written, expectedPrefix("2", "INFO", currentTid()) + "hello 42\n");
}

TEST_F(LoggingTest, LevelFiltersTheMacro) {
  setLogLevel(LogLevel::kWarn);
  EXPECT_TRUE(logEnabled(LogLevel::kError));
  EXPECT_TRUE(logEnabled(LogLevel::kWarn));
  EXPECT_FALSE(logEnabled(LogLevel::kInfo));
  EXPECT_FALSE(logEnabled(LogLevel::kNone));
  int evaluated = 0;
  auto sideEffect = [&] { return ++evaluated; };
  ::testing::internal::CaptureStderr();
  DETCOLL_LOG(kInfo) << "hidden " << sideEffect();
  DETCOLL_LOG(kWarn) << "shown " << sideEffect();
  const std::string written = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(evaluated, 1) << "the stream of a disabled level must not be evaluated";
  EXPECT_EQ(written.find("hidden"), std::string::npos) << written;
  EXPECT_NE(written.find("DETCOLL WARN shown 1\n"), std::string::npos) << written;

  setLogLevel(LogLevel::kNone);
  EXPECT_FALSE(logEnabled(LogLevel::kError));
  setLogLevel(LogLevel::kTrace);
  EXPECT_TRUE(logEnabled(LogLevel::kTrace));
}

TEST_F(LoggingTest, LevelNamesRoundTrip) {
  for (LogLevel level : {LogLevel::kNone, LogLevel::kError, LogLevel::kWarn, LogLevel::kInfo,
                         LogLevel::kDebug, LogLevel::kTrace}) {
    LogLevel parsed = level == LogLevel::kNone ? LogLevel::kTrace : LogLevel::kNone;
    ASSERT_TRUE(parseLogLevel(logLevelName(level), &parsed)) << logLevelName(level);
    EXPECT_EQ(parsed, level);
  }
}

}  // namespace
}  // namespace detcoll
