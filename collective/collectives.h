#pragma once

// The checked collectives behind the C API: local argument checks, the call agreement of
// call_agreement.h, then the algorithm of the mode. A failure returns the same status on every
// rank and leaves the output buffers untouched.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "collective/call_agreement.h"
#include "collective/communicator.h"
#include "collective/ordered_allreduce.h"
#include "collective/value_agreement.h"

namespace detcoll::collective {

// Per-communicator state reused across calls. Calls on one Collectives object must not overlap.
class Collectives {
 public:
  explicit Collectives(Communicator& comm) : comm_(comm) {}

  Communicator& communicator() { return comm_; }
  OrderedAllreduceOptions& orderedOptions() { return ordered_; }

  // `precheck` carries a failure the caller found before the call (it still takes part in the
  // agreement so every rank returns it). dtype and op are the caller's raw values.
  Status allreduce(Mode mode, const void* send, void* recv, size_t count, int dtype, int op,
                   const char* name, const Status& precheck = Status::ok());
  // Each rank contributes nleaves (1 to 65535, may differ between ranks) buffers; average divides
  // by the number of leaves over all ranks. Invariant mode: the result depends only on the
  // multiset of leaves. Ordered and native: each rank first folds its leaves in order.
  Status allreduceLeaves(Mode mode, const void* const* leaves, int nleaves, void* recv,
                         size_t count, int dtype, int op, const char* name,
                         const Status& precheck = Status::ok());
  Status broadcast(void* data, size_t count, int dtype, int root, const char* name,
                   const Status& precheck = Status::ok());
  // recv holds size() * count elements, rank j's at offset j * count.
  Status allgather(const void* send, void* recv, size_t count, int dtype, const char* name,
                   const Status& precheck = Status::ok());
  // Agrees on a status (init): every rank fails if one does; the mode must match too.
  Status agreeOnInit(Mode mode, const Status& local);
  // Agrees on a value every rank holds (compareValues of value_agreement.h), as a call of `kind`
  // checked like any other: a local failure fails every rank, a rank making another call gives
  // a mismatch. On success *all (if given) holds every rank's value.
  Status agreeOnValue(CallKind kind, const std::string& what, const Status& local,
                      const AgreedValue& mine,
                      const std::function<std::string(const AgreedValue&)>& describe,
                      std::vector<AgreedValue>* all = nullptr);

 private:
  Status reduce(Mode mode, const void* const* leaves, int nleaves, void* recv, size_t count,
                int dtype, int op, const char* name, const Status& precheck, bool single);
  const void* contribution(const void* const* leaves, int n, size_t count, DataType type,
                           ReduceOp op);

  Communicator& comm_;
  CallAgreement agreement_;
  OrderedAllreduceOptions ordered_;
  std::vector<const void*> inputs_;
  std::vector<char> staged_;  // folded or concatenated leaves
};

}  // namespace detcoll::collective
