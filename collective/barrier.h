#pragma once

// Barrier: returns on a rank once every rank has entered it. The backend's own where it has one,
// else a dissemination barrier over isend/irecv (ceil(log2 P) rounds).

#include "collective/transport/communicator.h"

namespace detcoll::collective {

struct BarrierOptions {
  bool useNative = true;  // the backend's own barrier, where it has one
};

Status barrier(transport::Communicator& comm, const BarrierOptions& options = {});

}  // namespace detcoll::collective
