#pragma once

// The fast path of a repeated step (docs/design.md, "The fast path"): once every rank has run the
// same set of requests twice in a row, negotiated, the engines run the next steps without the
// coordinator. A step's requests are known by name and descriptor, and so are the batches the
// last negotiated run made of them; each rank fires the next bucket (one response's batches) as
// soon as its members are enqueued locally, after one small vote that tells every rank whether
// every rank can. Anything else (a request the plan does not hold, a changed descriptor, a local
// error, a shutdown, a rank that waits too long) makes some rank vote no, and every engine goes
// back to negotiating, with the requests it holds.
//
// Pure logic here: what a step is (StepTracker) and the plan of one (FastPlan). The engine's side
// is fusion/engine_fast.cc.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "fusion/planner.h"
#include "fusion/request.h"
#include "fusion/response_cache.h"

namespace detcoll::fusion {

// Steps, learned from the responses every rank reads alike. A step ends where a request of it
// runs again (a name cannot be in flight twice, so its second run is the next step's); the step
// is repeated once the requests run since then are exactly the last step's, no more, no fewer.
class StepTracker {
 public:
  // One response's ready requests, by cache id, in the order they ran.
  void observe(const std::vector<uint32_t>& ids);
  // Forgets both steps: something ran that the fast path cannot take.
  void reset();
  bool repeated() const;
  // The requests since the last step ended, per response, in the order they ran.
  const std::vector<std::vector<uint32_t>>& latest() const { return current_; }

 private:
  std::vector<std::vector<uint32_t>> current_;
  std::unordered_set<uint32_t> currentIds_;
  std::unordered_set<uint32_t> previousIds_;
  size_t previousSize_ = 0;
  size_t shared_ = 0;  // current ids that the previous step has
};

// Where a request goes in a plan.
struct FastSlot {
  size_t bucket = 0;
  size_t index = 0;  // among the bucket's members
};

// The batches of one bucket, by member index.
struct FastBatch {
  std::vector<size_t> members;
  bool fused = false;
  size_t bytes = 0;
};

class FastPlan {
 public:
  // The plan of `step` (StepTracker::latest()): a bucket per response, holding the batches the
  // planner makes of that response's requests with `options`, which are the batches the
  // negotiated run made when its threshold was the same.
  FastPlan(const std::vector<std::vector<uint32_t>>& step, const ResponseCache& cache,
           const PlanOptions& options);

  // The slot of a request with this name and descriptor, or none: not a request of the plan.
  std::optional<FastSlot> find(const std::string& name, const Descriptor& d) const;
  size_t buckets() const { return buckets_.size(); }
  size_t members(size_t bucket) const { return buckets_[bucket].members; }
  const std::vector<FastBatch>& batches(size_t bucket) const { return buckets_[bucket].batches; }
  size_t fusionThresholdBytes() const { return fusionThresholdBytes_; }
  size_t requests() const { return slots_.size(); }

 private:
  struct Bucket {
    size_t members = 0;
    std::vector<FastBatch> batches;
  };
  struct Entry {
    FastSlot slot;
    Descriptor descriptor;
  };
  std::vector<Bucket> buckets_;
  std::unordered_map<std::string, Entry> slots_;
  size_t fusionThresholdBytes_ = 0;
};

// Whether a request like d may be part of a fast plan: allreduce, broadcast, allgather,
// reducescatter and alltoall of process set 0 on host memory. Joins, process sets and device
// requests are always negotiated.
bool fastEligible(const Descriptor& d);

}  // namespace detcoll::fusion
