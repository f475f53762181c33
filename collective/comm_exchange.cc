#include "collective/comm_exchange.h"

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

}  // namespace detcoll::collective
