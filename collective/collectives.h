#pragma once

// The checked collectives behind the C API's blocking calls (docs/design.md, "One blocking
// call"): the local argument checks of call_checks.h, the call agreement of call_agreement.h,
// then the algorithm: allreduce.h on host memory, the device path (device_path.h) on device
// memory, broadcast.h, allgather.h. A failure returns the same status on every rank and leaves
// the output buffers untouched.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collective/allreduce.h"
#include "collective/call_agreement.h"
#include "collective/call_checks.h"
#include "collective/device_path.h"
#include "collective/settings.h"
#include "collective/transport/communicator.h"

namespace detcoll::collective {

// Per-communicator state reused across calls. Calls on one Collectives object must not overlap.
class Collectives {
 public:
  explicit Collectives(transport::Communicator& comm) : comm_(comm) {}

  transport::Communicator& communicator() { return comm_; }
  // Input bytes of a shard per round of the host allreduce's schedule (pipeline.h).
  void setSegmentBytes(size_t bytes) { segmentBytes_ = bytes; }
  // How the invariant mode's host sums travel (DETCOLL_INVARIANT_TRANSPORT).
  void setInvariantTransport(InvariantTransport transport) { invariantTransport_ = transport; }

  // `precheck` carries a failure the caller found before the call (it still takes part in the
  // agreement so every rank returns it). dtype and op are the caller's raw values. `device` is
  // the CUDA device holding every buffer of the call, or -1 for host memory; device buffers go
  // to the device path (device_path.h), and every rank must pass the same kind.
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
  Status runBroadcast(void* data, size_t count, int dtype, int root, const char* name,
                      const Status& precheck, int device);
  Status runAllgather(const void* send, void* recv, size_t count, int dtype, const char* name,
                      const Status& precheck, int device);
  // The end of every call: a failure of the job (a rank gave up) fails the call, named by `kind`
  // and `name`, even where this rank's part succeeded.
  Status settle(const Status& status, const char* kind, const char* name);
  // The call agreement on the call `args` describes, with this rank's local checks' verdict and
  // its inline leaves, if any (inlined buffers of leafBytes each).
  Status agree(const CallArguments& args, const char* name, int mode, int leaves,
               const Status& local, int device, const void* const* inlined = nullptr,
               int ninlined = 0, size_t leafBytes = 0);

  transport::Communicator& comm_;
  CallAgreement agreement_;
  size_t segmentBytes_ = 1 << 20;
  InvariantTransport invariantTransport_ = InvariantTransport::kAuto;
  Gathered gathered_;  // every rank's inline leaves
  GpuTransport gpuTransport_ = GpuTransport::kAuto;
  void* stream_ = nullptr;
  std::unique_ptr<DevicePath> device_;
};

}  // namespace detcoll::collective
