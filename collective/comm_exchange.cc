#include "collective/comm_exchange.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "collective/ring_allreduce.h"
#include "collective/tags.h"

namespace detcoll::collective {

Status CommExchange::post(transport::ExchangeGroup& group, void*) {
  group.inFlight.reserve(group.inFlight.size() + group.recvs.size() + group.sends.size());
  for (const transport::Recv& r : group.recvs) {
    group.inFlight.push_back(comm_.irecv(r.data, r.bytes, r.peer, kTagPipeline));
  }
  for (const transport::Send& s : group.sends) {
    group.inFlight.push_back(comm_.isend(s.data, s.bytes, s.peer, kTagPipeline));
  }
  return Status::ok();
}

Status CommExchange::complete(transport::ExchangeGroup& group) {
  const Status status = transport::waitAll(group.inFlight.data(), group.inFlight.size());
  group.clear();
  return status;
}

Status CommExchange::nativeAllreduce(const void* send, void* recv, size_t count, DataType type,
                                     ReduceOp op, void*) {
  if (comm_.native() != nullptr) return comm_.native()->allreduce(send, recv, count, type, op);
  RingAllreduceOptions o;
  o.send = send;
  o.recv = recv;
  o.count = count;
  o.type = type;
  o.op = op;
  return ringAllreduce(comm_, o);
}

Status CommExchange::nativeMaxKeys(void* keys, size_t count, size_t keyBytes, void* stream) {
  if (comm_.native() != nullptr) return comm_.native()->allreduceMaxUnsigned(keys, count, keyBytes);
  std::vector<int32_t> wide(count);
  for (size_t i = 0; i < count; ++i) {
    uint16_t key = 0;
    std::memcpy(&key, static_cast<const char*>(keys) + i * keyBytes, keyBytes);
    wide[i] = key;
  }
  DETCOLL_RETURN_IF_ERROR(
      nativeAllreduce(wide.data(), wide.data(), count, DataType::kInt32, ReduceOp::kMax, stream));
  for (size_t i = 0; i < count; ++i) {
    const uint16_t key = static_cast<uint16_t>(wide[i]);
    std::memcpy(static_cast<char*>(keys) + i * keyBytes, &key, keyBytes);
  }
  return Status::ok();
}

}  // namespace detcoll::collective
