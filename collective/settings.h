#pragma once

// The collective layer's settings, read from the environment at init:
//   DETCOLL_DETERMINISM    native | ordered | invariant (default ordered): the mode of every call
//   DETCOLL_GPU_TRANSPORT  auto | nccl | mpi (default auto): how collectives on device memory
//                          travel (device_path.h)
//   DETCOLL_INVARIANT_TRANSPORT  auto | leaves | encodings | mpi (default auto): how the
//                          invariant mode's host sums travel (allreduce.h)
//   DETCOLL_AGREEMENT_TRANSPORT  auto | messages (default auto): how the agreements' records
//                          travel (transport/record_board.h)

#include <string>

#include "common/dtype.h"
#include "common/env.h"
#include "common/status.h"

namespace detcoll::collective {

// NCCL when it is built and a device is there (auto), NCCL only (nccl: an error where it cannot
// be used), or staged through host memory onto the CPU path (mpi).
enum class GpuTransport : int { kAuto = 0, kNccl = 1, kMpi = 2 };
const char* gpuTransportName(GpuTransport transport);

// The invariant mode's transport on the CPU path (docs/design.md, "The invariant mode"): every
// one gives the same bits, since the int64 sums are exact in any order.
enum class InvariantTransport : int {
  kAuto = 0,       // leaves when every rank holds one leaf, else encodings
  kLeaves = 1,     // each rank's leaf in the dtype; the owner of a shard reduces the P leaves
  kEncodings = 2,  // keys, then int64 sums, over detcoll's own pipeline (any spread of leaves)
  kMpi = 3,        // keys (max) and int64 sums through the MPI library's own MPI_Allreduce
};
const char* invariantTransportName(InvariantTransport transport);

// How the agreements' records travel (docs/design.md, "The record board"): through a record
// board in shared memory where every rank of a communicator is on one node (auto), or always as
// messages (messages). The records, and so every result, are the same either way.
enum class AgreementTransport : int { kAuto = 0, kMessages = 1 };
const char* agreementTransportName(AgreementTransport transport);

struct Settings {
  Mode mode = Mode::kOrdered;
  GpuTransport gpuTransport = GpuTransport::kAuto;
  InvariantTransport invariantTransport = InvariantTransport::kAuto;
  AgreementTransport agreementTransport = AgreementTransport::kAuto;
};

// The settings from `env`; on an invalid value, the error and *settings untouched.
Status loadSettings(Environment& env, Settings* settings);

}  // namespace detcoll::collective
