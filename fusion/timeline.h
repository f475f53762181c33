#pragma once

// The timeline (DETCOLL_TIMELINE=file): a Chrome trace (JSON array format, viewable in Perfetto
// or chrome://tracing) of each request's phases: NEGOTIATE (enqueued until every rank has it),
// then for an allreduce COPY_IN, ALLREDUCE and COPY_OUT when it went through a fusion buffer, or
// its collective alone. One row per name. Rank 0 writes it, like Horovod's.

#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "fusion/request.h"

namespace detcoll::fusion {

class Timeline {
 public:
  ~Timeline();

  // Opens (truncates) the file. Not called: every method does nothing.
  Status open(const std::string& path);
  bool active() const { return file_ != nullptr; }

  // A complete phase of one request, with optional extra detail ("batch of 12, 3.1 MiB").
  void phase(const std::string& name, const char* phase, Clock::time_point begin,
             Clock::time_point end, const std::string& detail = "");
  void close();

 private:
  int rowOf(const std::string& name);
  void write(const std::string& event);

  std::mutex mutex_;
  std::FILE* file_ = nullptr;
  Clock::time_point origin_;
  std::unordered_map<std::string, int> rows_;
  bool first_ = true;
};

}  // namespace detcoll::fusion
