// The C API's debugging calls: content fingerprints (common/fingerprint.h). The collective trace
// (DETCOLL_TRACE) is written by the library itself; see fusion/trace.h.

#include "bindings/c/detcoll.h"
#include "bindings/c/runtime.h"
#include "common/fingerprint.h"

using detcoll::Status;
using detcoll::bindings::c::finish;

extern "C" {

detcoll_status_t detcoll_hash(const void* data, size_t bytes, uint64_t* hash) {
  if (hash == nullptr) return finish(Status::invalidArgument("detcoll_hash: hash is null"));
  if (data == nullptr && bytes > 0) {
    return finish(Status::invalidArgument("detcoll_hash: data is null with bytes = " +
                                          std::to_string(bytes)));
  }
  if (bytes > 0) {
    const Status host = detcoll::bindings::c::checkHostMemory(
        data, "data", "detcoll_hash reads host memory; copy a device buffer to the host first");
    if (!host.isOk()) return finish(host.prefixed("detcoll_hash"));
  }
  *hash = detcoll::fingerprint(data, bytes);
  return finish(Status::ok());
}

}  // extern "C"
