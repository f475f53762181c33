#include "kernels/reduce_device.h"

#include "kernels/bodies/reduce_kernels.h"
#include "kernels/device_executor.cuh"

namespace detcoll::kernels::device {

Status foldRankOrder(void* out, const void* const* inputs, int k, size_t count, DataType type,
                     ReduceOp op, int64_t divisor, void* stream) {
  DeviceExecutor e(stream);
  bodies::foldRankOrder(e, out, inputs, k, count, type, op, divisor);
  return e.status();
}

Status localMaxKeys(void* keys, const void* const* leaves, int nleaves, size_t n, DataType type,
                    void* stream) {
  DeviceExecutor e(stream);
  bodies::localMaxKeys(e, keys, leaves, nleaves, n, type);
  return e.status();
}

Status foldMaxKeys(void* out, const void* const* pieces, int p, size_t n, DataType type,
                   void* stream) {
  DeviceExecutor e(stream);
  bodies::foldMaxKeys(e, out, pieces, p, n, type);
  return e.status();
}

Status encodeLeaves(int64_t* out, const void* const* leaves, int nleaves, const void* keys,
                    size_t n, DataType type, void* stream) {
  DeviceExecutor e(stream);
  bodies::encodeLeaves(e, out, leaves, nleaves, keys, n, type);
  return e.status();
}

Status decodeSums(void* out, const int64_t* const* pieces, int p, const void* keys, size_t n,
                  DataType type, ReduceOp op, int64_t leaves, void* stream) {
  DeviceExecutor e(stream);
  bodies::decodeSums(e, out, pieces, p, keys, n, type, op, leaves);
  return e.status();
}

Status invariantReduceLocal(void* out, const void* const* leaves, int nleaves, size_t count,
                            DataType type, ReduceOp op, void* stream) {
  DeviceExecutor e(stream);
  bodies::invariantReduceLocal(e, out, leaves, nleaves, count, type, op);
  return e.status();
}

}  // namespace detcoll::kernels::device
