#include "fusion/fast_path.h"

#include <memory>
#include <utility>

namespace detcoll::fusion {

void StepTracker::observe(const std::vector<uint32_t>& ids) {
  if (ids.empty()) return;
  bool again = false;
  for (uint32_t id : ids) again = again || currentIds_.count(id) > 0;
  if (again) {
    previousIds_ = std::move(currentIds_);
    previousSize_ = previousIds_.size();
    current_.clear();
    currentIds_.clear();
    shared_ = 0;
  }
  current_.push_back(ids);
  for (uint32_t id : ids) {
    if (currentIds_.insert(id).second && previousIds_.count(id) > 0) ++shared_;
  }
}

void StepTracker::reset() {
  current_.clear();
  currentIds_.clear();
  previousIds_.clear();
  previousSize_ = 0;
  shared_ = 0;
}

bool StepTracker::repeated() const {
  return previousSize_ > 0 && currentIds_.size() == previousSize_ && shared_ == previousSize_;
}

FastPlan::FastPlan(const std::vector<std::vector<uint32_t>>& step, const ResponseCache& cache,
                   const PlanOptions& options)
    : fusionThresholdBytes_(options.fusionThresholdBytes) {
  for (const std::vector<uint32_t>& ids : step) {
    Bucket bucket;
    bucket.members = ids.size();
    // The planner plans requests: stand-ins that carry the name and descriptor alone.
    std::vector<RequestPtr> standIns;
    std::unordered_map<const Request*, size_t> index;
    for (uint32_t id : ids) {
      RequestSpec spec;
      spec.name = cache.name(id);
      spec.descriptor = cache.descriptor(id);
      standIns.push_back(std::make_shared<Request>(std::move(spec), nullptr));
      index.emplace(standIns.back().get(), standIns.size() - 1);
      slots_[cache.name(id)] = {{buckets_.size(), standIns.size() - 1}, cache.descriptor(id)};
    }
    for (const Batch& batch : planBatches(standIns, options)) {
      FastBatch b;
      b.fused = batch.fused;
      b.bytes = batch.bytes;
      for (const RequestPtr& request : batch.requests) b.members.push_back(index[request.get()]);
      bucket.batches.push_back(std::move(b));
    }
    buckets_.push_back(std::move(bucket));
  }
}

std::optional<FastSlot> FastPlan::find(const std::string& name, const Descriptor& d) const {
  const auto it = slots_.find(name);
  if (it == slots_.end() || it->second.descriptor != d) return std::nullopt;
  return it->second.slot;
}

bool fastEligible(const Descriptor& d) {
  return d.kind != RequestKind::kJoin && d.processSet == 0 && !d.device;
}

}  // namespace detcoll::fusion
