#pragma once

// The GPU data path's allreduce run on the host: collective/allreduce.h with the device's bodies
// (kernels/bodies/reduce_kernels.h) on the serial executor (serial_executor.h), over an Exchange
// (collective::CommExchange for ranks as threads). The schedule is the one the CPU path runs; the
// kernels are the ones the GPU runs. Its bits must equal the CPU path's for every mode, dtype, op,
// world size and split.

#include "collective/allreduce.h"
#include "collective/transport/exchange.h"
#include "common/status.h"

namespace detcoll::testing {

// Host buffers; the options as collective::allreduce takes them.
Status serialAllreduce(collective::transport::Exchange& exchange,
                       const collective::AllreduceOptions& options);

}  // namespace detcoll::testing
