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
  // Records `ready` and `done` on `stream` (a cudaStream_t of `device`; null: the legacy default
  // stream); the engine records `done` again after the request's work.
  static Status make(int device, void* stream, std::shared_ptr<DeviceMarks>* out);
  ~DeviceMarks();
  DeviceMarks(const DeviceMarks&) = delete;
  DeviceMarks& operator=(const DeviceMarks&) = delete;

  int device() const { return device_; }
  void* ready() const { return ready_; }
  void* done() const { return done_; }
  // `stream` waits for `done` without the host waiting; a null stream: the host waits. Until the
  // engine queues the request's work, `done` marks the caller's work up to the enqueue, so a
  // request that failed before that waits for nothing of the engine's.
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
  // failure of one rank's CUDA work is every rank's (the device path agrees on it). A joined
  // rank's stand-ins (Engine::stand: `owned` set, no buffers) read device zeros and write a
  // buffer nobody reads, on the device of this rank's device requests, or before the first one
  // on `joinDevice` (the device join() was called on; -1: device 0).
  Status run(const Batch& batch, int joinDevice);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace detcoll::fusion
