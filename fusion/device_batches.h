#pragma once

// Requests on CUDA device memory in the fusion engine (docs/design.md, "Device tensors in the
// engine"). A request's buffers are all host memory or all memory of one device; the device flag
// is part of the descriptor, so ranks that give one name different kinds of memory fail with a
// mismatch, and the planner never fuses host and device requests together.
//
// Stream order, with no host wait in the steady state: at enqueue a `ready` event is recorded on
// the caller's stream, and the engine's stream waits for it before it reads the request's
// buffers; after the result is in place the engine records `done` on its stream, and the caller's
// stream waits for that (waitFor). Allreduces are packed into a device fusion buffer with
// device-to-device copies and reduced by the device path (collective/device_path.h: NCCL, or the
// buffers staged through host memory), which has the host path's bits; broadcasts and allgathers
// take the device path as they are; reduce-scatters and alltoalls are staged through host memory
// onto the host collectives (the host waits for them).

#include <cstddef>
#include <memory>

#include "collective/device_path.h"
#include "collective/settings.h"
#include "collective/transport/communicator.h"
#include "common/status.h"
#include "fusion/planner.h"

namespace detcoll::fusion {

// The two events of one request on device memory (above).
class DeviceMarks {
 public:
  // Records `ready` on `stream` (a cudaStream_t of `device`; null: the legacy default stream).
  static Status make(int device, void* stream, std::shared_ptr<DeviceMarks>* out);
  ~DeviceMarks();
  DeviceMarks(const DeviceMarks&) = delete;
  DeviceMarks& operator=(const DeviceMarks&) = delete;

  int device() const { return device_; }
  void* ready() const { return ready_; }
  void* done() const { return done_; }
  // `stream` waits for `done` without the host waiting; a null stream: the host waits. A request
  // that failed before its work was queued has no `done` to wait for: this returns at once.
  Status waitFor(void* stream) const;

 private:
  DeviceMarks() = default;
  int device_ = -1;
  void* ready_ = nullptr;  // cudaEvent_t
  void* done_ = nullptr;
};

// The engine's device side: its own device path (NCCL communicator or staging) over the engine's
// communicator, its stream, and its fusion buffer. Used by the engine's thread alone.
class DeviceBatches {
 public:
  struct Options {
    collective::GpuTransport gpuTransport = collective::GpuTransport::kAuto;
    size_t segmentBytes = 1 << 20;
    collective::InvariantTransport invariantTransport = collective::InvariantTransport::kAuto;
  };
  DeviceBatches(collective::transport::Communicator& comm, Options options);
  ~DeviceBatches();
  DeviceBatches(const DeviceBatches&) = delete;
  DeviceBatches& operator=(const DeviceBatches&) = delete;

  // Runs a batch of device requests (of process set 0) and records each one's `done`; a
  // failure of one rank's CUDA work is every rank's (the device path agrees on it).
  Status run(const Batch& batch);
  // `bytes` of device zeros and a device buffer as large that nobody reads, on the device of
  // this rank's device requests (device 0 before the first): a joined rank's part of the others'
  // allreduce (Engine::stand). Valid until the next call.
  Status joinedBuffers(size_t bytes, const void** zeros, void** sink);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace detcoll::fusion
