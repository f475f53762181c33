#pragma once

// The schedule's transport over a host Communicator: a group is its isend/irecv transfers,
// completed by waiting for them; native mode is the backend's own allreduce, or the ring where it
// has none (collective/ring_allreduce.h).

#include "collective/transport/communicator.h"
#include "collective/transport/exchange.h"

namespace detcoll::collective {

class CommExchange : public transport::Exchange {
 public:
  explicit CommExchange(transport::Communicator& comm) : comm_(comm) {}

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  Status post(transport::ExchangeGroup& group, void* stream) override;
  Status complete(transport::ExchangeGroup& group) override;
  Status nativeAllreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         void* stream) override;
  // The backend's own allreduce, or the ring of int32 widenings where it has none.
  Status nativeMaxKeys(void* keys, size_t count, size_t keyBytes, void* stream) override;
  transport::RecordBoard* board() override { return comm_.board(); }

 private:
  transport::Communicator& comm_;
};

}  // namespace detcoll::collective
