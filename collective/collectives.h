#pragma once

// The checked collectives behind the C API: local argument checks, the call agreement of
// call_agreement.h, then the algorithm of the mode. A failure returns the same status on every
// rank and leaves the output buffers untouched.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collective/call_agreement.h"
#include "collective/device_collectives.h"
#include "collective/ordered_allreduce.h"
#include "collective/transport/communicator.h"

namespace detcoll::collective {

// Per-communicator state reused across calls. Calls on one Collectives object must not overlap.
class Collectives {
 public:
  explicit Collectives(Communicator& comm) : comm_(comm) {}

  Communicator& communicator() { return comm_; }
  OrderedAllreduceOptions& orderedOptions() { return ordered_; }

  // `precheck` carries a failure the caller found before the call (it still takes part in the
  // agreement so every rank returns it). dtype and op are the caller's raw values. `device` is
  // the CUDA device holding every buffer of the call, or -1 for host memory; device buffers go
  // to the device path (device_collectives.h), and every rank must pass the same kind.
  Status allreduce(Mode mode, const void* send, void* recv, size_t count, int dtype, int op,
                   const char* name, const Status& precheck = Status::ok(), int device = -1);
  // Each rank contributes nleaves (1 to 65535, may differ between ranks) buffers; average divides
  // by the number of leaves over all ranks. Invariant mode: the result depends only on the
  // multiset of leaves. Ordered and native: each rank first folds its leaves in order.
  Status allreduceLeaves(Mode mode, const void* const* leaves, int nleaves, void* recv,
                         size_t count, int dtype, int op, const char* name,
                         const Status& precheck = Status::ok(), int device = -1);
  Status broadcast(void* data, size_t count, int dtype, int root, const char* name,
                   const Status& precheck = Status::ok(), int device = -1);
  // recv holds size() * count elements, rank j's at offset j * count.
  Status allgather(const void* send, void* recv, size_t count, int dtype, const char* name,
                   const Status& precheck = Status::ok(), int device = -1);
  // How device memory travels (DETCOLL_GPU_TRANSPORT), before the first device call.
  void setGpuTransport(GpuTransport transport) { gpuTransport_ = transport; }
  // The cudaStream_t of device calls; null: the library's stream, and calls wait for their work.
  void setCudaStream(void* stream);
  // The device path, made at the first device call.
  DevicePath& devicePath();
  // Agrees on a status (init): every rank fails if one does; the mode must match too.
  Status agreeOnInit(Mode mode, const Status& local);
  // Agrees on a value every rank holds (compareValues of agreement.h, on `what`) as a call that
  // `call` describes ("seed agreement"), checked like any other: a local failure fails every
  // rank, a rank making another call gives a mismatch. On success *all (if given) holds every
  // rank's value.
  Status agreeOnValue(const std::string& call, const std::string& what, const Status& local,
                      const AgreedValue& mine,
                      const std::function<std::string(const AgreedValue&)>& describe,
                      std::vector<AgreedValue>* all = nullptr);

 private:
  Status reduce(Mode mode, const void* const* leaves, int nleaves, void* recv, size_t count,
                int dtype, int op, const char* name, const Status& precheck, bool single,
                int device);
  // The CPU path after the agreement; payload: this rank's inline data, or null.
  Status reduceHost(Mode mode, const void* const* leaves, int n, void* recv, size_t count,
                    DataType type, ReduceOp op, int64_t total, const void* payload);
  const void* contribution(const void* const* leaves, int n, size_t count, DataType type,
                           ReduceOp op);

  Communicator& comm_;
  CallAgreement agreement_;
  OrderedAllreduceOptions ordered_;
  std::vector<const void*> inputs_;
  std::vector<char> staged_;  // folded or concatenated leaves
  GpuTransport gpuTransport_ = GpuTransport::kAuto;
  void* stream_ = nullptr;
  std::unique_ptr<DevicePath> device_;
};

}  // namespace detcoll::collective
