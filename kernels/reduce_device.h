#pragma once

// The allreduce kernels on a CUDA device, on caller buffers (kernels/bodies/reduce_kernels.h
// launched by kernels/device_executor.cuh): the rank-order fold and the invariant codec, each
// bit-identical to its CPU counterpart in kernels/fold.h and kernels/fixed_point.h, for the GPU
// tests and benchmarks. Built only with CUDA.
//
// Buffers are device memory; the pointer arrays themselves are host arrays of device pointers.
// Work is enqueued on `stream` (a cudaStream_t; null: the legacy default stream) and the calls
// return without waiting. A CUDA failure is a backend error naming the call. No argument checks:
// the callers (the allreduce pipeline, the tests) pass what the CPU functions would take.

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::kernels::device {

// kernels::foldRankOrder: out may alias an input exactly; divisor is used by average only.
Status foldRankOrder(void* out, const void* const* inputs, int k, size_t count, DataType type,
                     ReduceOp op, int64_t divisor, void* stream);
// kernels::localMaxKeys over elements [0, n) of the leaves.
Status localMaxKeys(void* keys, const void* const* leaves, int nleaves, size_t n, DataType type,
                    void* stream);
// kernels::foldMaxKeys.
Status foldMaxKeys(void* out, const void* const* pieces, int p, size_t n, DataType type,
                   void* stream);
// kernels::encodeLeaves over elements [0, n).
Status encodeLeaves(int64_t* out, const void* const* leaves, int nleaves, const void* keys,
                    size_t n, DataType type, void* stream);
// kernels::decodeSums.
Status decodeSums(void* out, const int64_t* const* pieces, int p, const void* keys, size_t n,
                  DataType type, ReduceOp op, int64_t leaves, void* stream);
// kernels::invariantReduceLocal: out may alias a leaf exactly.
Status invariantReduceLocal(void* out, const void* const* leaves, int nleaves, size_t count,
                            DataType type, ReduceOp op, void* stream);

}  // namespace detcoll::kernels::device
