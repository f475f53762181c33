#include "tests/support/serial_allreduce.h"

#include <memory>
#include <vector>

#include "collective/device_pipeline.h"
#include "collective/mode_allreduce.h"
#include "collective/tags.h"
#include "tests/support/serial_executor.h"

namespace detcoll::testing {

using collective::kTagReduceScatter;
using collective::Transfer;
using collective::waitAll;

Status serialAllreduce(DeviceTransport& transport, Mode mode, const void* const* leaves,
                       int nleaves, void* recv, size_t count, DataType type, ReduceOp op,
                       int64_t totalLeaves, size_t segmentBytes) {
  testing::SerialExecutor e;
  return collective::device_pipeline::allreduce(e, transport, nullptr, mode, leaves, nleaves, recv,
                                                count, type, op, totalLeaves, segmentBytes);
}

Status CommTransport::exchange(const std::vector<SendSpec>& sends,
                               const std::vector<RecvSpec>& recvs, void*) {
  std::vector<std::unique_ptr<Transfer>> requests;
  requests.reserve(sends.size() + recvs.size());
  for (const RecvSpec& r : recvs) {
    requests.push_back(comm_.irecv(r.data, r.bytes, r.peer, kTagReduceScatter));
  }
  for (const SendSpec& s : sends) {
    requests.push_back(comm_.isend(s.data, s.bytes, s.peer, kTagReduceScatter));
  }
  return waitAll(requests.data(), requests.size());
}

Status CommTransport::nativeAllreduce(const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op, void*) {
  return collective::modeAllreduce(comm_, Mode::kNative, send, recv, count, type, op);
}

}  // namespace detcoll::testing
