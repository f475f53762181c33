#include "fusion/planner.h"

#include <map>
#include <tuple>

namespace detcoll::fusion {

std::vector<Batch> planBatches(const std::vector<RequestPtr>& ready, const PlanOptions& options) {
  std::vector<Batch> batches;
  // The open batch of each (dtype, op, mode, set, memory), by index into batches.
  std::map<std::tuple<DataType, ReduceOp, Mode, uint32_t, bool>, size_t> open;
  for (const RequestPtr& request : ready) {
    const Descriptor& d = request->descriptor();
    const size_t bytes = d.bytes();
    const size_t direct = d.device ? options.deviceDirectBytes : options.directBytes;
    const bool fusable = d.kind == RequestKind::kAllreduce && options.fusionThresholdBytes > 0 &&
                         bytes > 0 && bytes < direct && bytes <= options.fusionThresholdBytes;
    if (!fusable) {
      batches.push_back({{request}, false, bytes});
      continue;
    }
    const auto key = std::make_tuple(d.type, d.op, d.mode, d.processSet, d.device);
    auto it = open.find(key);
    if (it == open.end() || batches[it->second].bytes + bytes > options.fusionThresholdBytes) {
      batches.push_back({{}, false, 0});
      it = open.insert_or_assign(key, batches.size() - 1).first;
    }
    Batch& batch = batches[it->second];
    batch.requests.push_back(request);
    batch.bytes += bytes;
    batch.fused = batch.requests.size() > 1;
  }
  return batches;
}

}  // namespace detcoll::fusion
