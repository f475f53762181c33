#pragma once

// The collective trace (DETCOLL_TRACE=DIR; docs/design.md, "The debugger"): each rank writes, to
// DIR/collectives.rank<R>.jsonl (JSON Lines), a record of every collective call that succeeded on
// it, with the fingerprints (common/fingerprint.h) of its inputs, taken before the call, and of
// its output:
//   {"detcoll_trace": 1, "source": "collectives", "rank", "size", "mode", "settings"}  (header)
//   {"seq", "kind", "name", "set", "mode", "dtype", "op", "count", "leaves", "inputs", "output",
//    "async", and for the engine's requests "batch" and, in a fused batch, "members"}  (a call)
//   {"end": true, "records"}  (a clean detcoll_finalize; a file without it is truncated)
//
// Order: one counter per rank numbers the records (seq) as they are appended, under the trace's
// mutex, which is when each call completes: a blocking call's on its thread once it returned, the
// engine's requests batch by batch in the order the engine runs them (the response order, the same
// on every rank), before they complete. So the engine's records come in the same order on every
// rank (a process set's on its members only); a blocking call made while requests are in flight
// falls between their records where its timing puts it.
//
// Writing never waits for the file: records go to a buffer in memory, which a writer thread
// writes out and flushes to the operating system at most kFlushInterval after a record arrives,
// and at close. A process that crashes leaves whole records but for the last one at most.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::fusion {

// One call as the trace records it.
struct TraceRecord {
  std::string kind;  // "allreduce", "allreduce_leaves", "broadcast", "allgather", ...
  std::string name;  // as given, a stage shown as shownName shows it, without the process set
  uint32_t set = 0;  // the process set
  Mode mode = Mode::kOrdered;
  DataType type = DataType::kFloat32;
  std::optional<ReduceOp> op;  // the reductions' only
  uint64_t count = 0;          // elements of each input (allgather: this rank's)
  int leaves = 1;
  // Device buffers are not fingerprinted (host memory only): inputs and output are then null.
  bool device = false;
  std::vector<uint64_t> inputs;  // one per input buffer; none where the rank gives none
  uint64_t output = 0;
  bool async = false;  // an engine request; the trace gives it "batch" and "members"
};

// The name a record shows for an engine name (common/names.h): the name as given, a stage as
// "name (stage)", without the process set's suffix (the record names the set).
std::string traceName(const std::string& qualified);

class Trace {
 public:
  static constexpr std::chrono::milliseconds kFlushInterval{100};

  Trace() = default;
  ~Trace();  // close(false)
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // Creates `dir` and its parents where missing, opens (truncates) DIR/collectives.rank<R>.jsonl,
  // writes the header and starts the writer. `settings`: name and value of every DETCOLL_* and
  // HOROVOD_* variable set. An error naming DETCOLL_TRACE, the path and the reason.
  Status open(const std::string& dir, int rank, int size, Mode mode,
              const std::vector<std::pair<std::string, std::string>>& settings);
  const std::string& path() const { return path_; }

  // A blocking call's record.
  void append(const TraceRecord& record);
  // The records of one batch of the engine, in the order of its buffer: "batch" is the first's
  // seq, and where there are several each lists them all as "members".
  void appendBatch(const std::vector<TraceRecord>& records);

  // Writes what is buffered, with the end record when `complete` (a clean finalize), stops the
  // writer and closes the file. Later appends are dropped; a second close does nothing.
  void close(bool complete);

 private:
  void add(const TraceRecord& record, int64_t batch, const std::vector<std::string>* members);
  void writer();
  bool writeOut(const std::string& text);  // on the writer thread, or once it has stopped

  std::mutex mutex_;
  std::condition_variable wake_;
  std::string buffer_;  // whole lines not yet written
  uint64_t records_ = 0;
  bool open_ = false;
  bool closing_ = false;
  bool failed_ = false;  // a write failed: the file is not complete
  int fd_ = -1;
  std::string path_;
  std::thread thread_;
};

}  // namespace detcoll::fusion
