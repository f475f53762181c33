#pragma once

// The collective trace (DETCOLL_TRACE=DIR; docs/design.md, "The debugger"): each rank writes, to
// DIR/collectives.rank<R>.jsonl (JSON Lines), a record of every collective call that ran on it,
// with the fingerprints (common/fingerprint.h) of its inputs, taken before the call, and of its
// output:
//   {"detcoll_trace": 1, "source": "collectives", "rank", "size", "mode", "settings"}  (header)
//   {"seq", "kind", "name", "set", "mode", "dtype", "op", "count", "leaves", "inputs", "output",
//    "async", and for the engine's requests "batch", on a fused batch's first record "members";
//    "joined" for a joined rank's zeros, "error" (output null) for a call that failed}
//   {"end": true, "records"}  (a clean detcoll_finalize; a file without it is truncated)
// A process that initializes again after finalize writes collectives.rank<R>.session<N>.jsonl.
// Rank 0 removes the files of ranks the run does not have (an earlier run's, of more ranks).
//
// Order: seq numbers a rank's records as they are appended, which is when each call completes: a
// blocking call's on its thread once it returned, the engine's requests batch by batch in the
// order the engine runs them (the response order, the same on every rank). Where a blocking call
// runs while requests are in flight, its place among their records depends on timing, so records
// of two runs or ranks are matched by kind, name, process set and the name's occurrence, not by
// seq (detcoll/debug/diff.py).
//
// Writing never waits for the file: records are queued in memory as they are, and a writer thread
// formats them and writes them out at most kFlushInterval after they arrive, and at close. A
// process killed loses what arrived in the last kFlushInterval at most. Only when more than
// kMaxQueued records wait (a disk far slower than the collectives) does an append wait.

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
  bool async = false;   // an engine request; the trace gives it "batch" and "members"
  bool joined = false;  // the zeros a joined rank gives to the others' allreduce
  std::string error;    // a failed call's reason (its output is not fingerprinted)
};

// The name a record shows for an engine name (common/names.h): the name as given, a stage as
// "name (stage)", without the process set's suffix (the record names the set).
std::string traceName(const std::string& qualified);

class Trace {
 public:
  static constexpr std::chrono::milliseconds kFlushInterval{100};
  static constexpr size_t kMaxQueued = 1 << 16;

  Trace() = default;
  ~Trace();  // close(false)
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // Opening is in two parts, so that a failed init leaves the files of an earlier run as they
  // were: prepare() before the ranks agree that init succeeded, start() after.
  // prepare(): creates `dir` and its parents where missing and opens the trace's file,
  // DIR/collectives.rank<R>.jsonl (collectives.rank<R>.session<N>.jsonl for session N > 1), under
  // its name with ".partial" appended. An error naming DETCOLL_TRACE, the path and the reason.
  Status prepare(const std::string& dir, int rank, int session = 1);
  // start(): gives the file its name (replacing an earlier run's), writes the header and starts
  // the writer. `settings`: name and value of the variables the header lists.
  Status start(int size, Mode mode,
               const std::vector<std::pair<std::string, std::string>>& settings);
  // After prepare(), when init failed: closes and removes the new file (close() does too).
  void abandon();
  // prepare() and start().
  Status open(const std::string& dir, int rank, int size, Mode mode,
              const std::vector<std::pair<std::string, std::string>>& settings);
  const std::string& path() const { return path_; }

  // A blocking call's record.
  void append(TraceRecord record);
  // The records of one batch of the engine, in the order of its buffer: "batch" is the first's
  // seq, and where there are several the first lists them all as "members".
  void appendBatch(std::vector<TraceRecord> records);

  // Writes what is queued, with the end record when `complete` (a clean finalize), stops the
  // writer and closes the file. Later appends are dropped; a second close does nothing.
  void close(bool complete);

 private:
  struct Queued {
    TraceRecord record;
    uint64_t seq = 0;
    int64_t batch = -1;
    std::vector<std::string> members;
  };

  void add(std::unique_lock<std::mutex>& lock, TraceRecord&& record, int64_t batch,
           std::vector<std::string> members);
  static std::string format(const Queued& q);  // on the writer thread
  void removeStale(int size);                  // rank 0, at start()
  void writer();
  bool writeOut(const std::string& text);  // on the writer thread, or once it has stopped

  std::mutex mutex_;
  std::condition_variable wake_;     // the writer: records queued, or closing_
  std::condition_variable drained_;  // an append waiting for room
  std::vector<Queued> queued_;       // not yet written
  std::string tail_;                 // the end record, written after the queue at close
  uint64_t records_ = 0;
  int rank_ = 0;
  std::string dir_;
  std::string suffix_;  // ".session<N>" for session N > 1
  bool open_ = false;
  bool closing_ = false;
  bool failed_ = false;  // a write failed: the file is not complete
  int fd_ = -1;
  std::string path_;
  std::thread thread_;
};

}  // namespace detcoll::fusion
