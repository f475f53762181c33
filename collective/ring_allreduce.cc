#include "collective/ring_allreduce.h"

#include <cstring>
#include <vector>

#include "collective/tags.h"
#include "kernels/fold.h"

namespace detcoll::collective {

Status ringAllreduce(transport::Communicator& comm, const RingAllreduceOptions& o) {
  const void* send = o.send;
  void* recv = o.recv;
  const size_t count = o.count;
  const DataType type = o.type;
  const ReduceOp op = o.op;
  const int p = comm.size();
  const int r = comm.rank();
  const size_t es = dataTypeSize(type);
  char* out = static_cast<char*>(recv);
  if (count > 0 && send != recv) std::memcpy(out, send, count * es);
  const ReduceOp stepOp = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  if (p > 1 && count > 0) {
    auto chunkBegin = [&](int c) { return count / p * c + std::min<size_t>(c, count % p); };
    auto chunkLength = [&](int c) { return chunkBegin(c + 1) - chunkBegin(c); };
    std::vector<char> incoming(chunkLength(0) * es);
    const int right = (r + 1) % p;
    const int left = (r - 1 + p) % p;
    // Reduce-scatter: after step s, rank r holds chunk (r - s - 1) summed over s + 2 ranks.
    for (int s = 0; s < p - 1; ++s) {
      const int sendChunk = (r - s + p) % p;
      const int recvChunk = (r - s - 1 + 2 * p) % p;
      std::unique_ptr<transport::Transfer> transfers[2] = {
          comm.irecv(incoming.data(), chunkLength(recvChunk) * es, left, kTagRing),
          comm.isend(out + chunkBegin(sendChunk) * es, chunkLength(sendChunk) * es, right,
                     kTagRing)};
      DETCOLL_RETURN_IF_ERROR(transport::waitAll(transfers, 2));
      char* target = out + chunkBegin(recvChunk) * es;
      const void* inputs[2] = {incoming.data(), target};
      kernels::foldRankOrder(target, inputs, 2, chunkLength(recvChunk), type, stepOp, 1);
    }
    // Allgather: rank r starts with the finished chunk (r + 1).
    for (int s = 0; s < p - 1; ++s) {
      const int sendChunk = (r + 1 - s + p) % p;
      const int recvChunk = (r - s + p) % p;
      std::unique_ptr<transport::Transfer> transfers[2] = {
          comm.irecv(out + chunkBegin(recvChunk) * es, chunkLength(recvChunk) * es, left, kTagRing),
          comm.isend(out + chunkBegin(sendChunk) * es, chunkLength(sendChunk) * es, right,
                     kTagRing)};
      DETCOLL_RETURN_IF_ERROR(transport::waitAll(transfers, 2));
    }
  }
  if (op == ReduceOp::kAverage && count > 0) {
    const void* inputs[1] = {out};
    kernels::foldRankOrder(out, inputs, 1, count, type, ReduceOp::kAverage, p);
  }
  return Status::ok();
}

}  // namespace detcoll::collective
