#pragma once

// The allreduce kernels on the CPU (kernels/fold.h, kernels/fixed_point.h: vectorized, with
// AVX2/AVX-512 clones picked at run time) behind the interface the allreduce schedule calls
// (collective/pipeline.h, "Kernels"), which kernels/bodies/reduce_kernels.h offers for the GPU.
// Pieces are host memory; nothing fails (status() is always ok) and nothing is ordered on a
// stream.
//
// Scratch comes from a per-thread arena: the k-th allocation of a call reuses the k-th buffer of
// the calls before it on this thread, so that steady-state calls neither allocate nor fault
// pages. It is valid until it is released, or the HostReduceKernels object that handed it out is
// destroyed.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/pieces.h"

namespace detcoll::kernels {

class HostReduceKernels {
 public:
  HostReduceKernels();
  ~HostReduceKernels();
  HostReduceKernels(const HostReduceKernels&) = delete;
  HostReduceKernels& operator=(const HostReduceKernels&) = delete;

  template <typename T>
  T* alloc(int64_t n) {
    return static_cast<T*>(scratch(static_cast<size_t>(n > 0 ? n : 1) * sizeof(T)));
  }
  Status status() const { return Status::ok(); }
  void* stream() const { return nullptr; }
  // Scratch in use now, and a release of what was handed out after that mark (for reuse by the
  // next allocations).
  size_t mark() const;
  void release(size_t mark);
  // Host pointers are read where they are: the table is the array itself (kept by the caller).
  Pieces table(const void* const* pointers, int k);

  void fold(void* out, const Pieces& pieces, int k, int64_t n, DataType type, ReduceOp op,
            int64_t divisor, bool vectorized);
  void localKeys(void* keys, const Pieces& leaves, int nleaves, int64_t n, DataType type,
                 bool vectorized);
  void foldKeys(void* out, const Pieces& pieces, int p, int64_t n, DataType type);
  void encode(int64_t* out, const Pieces& leaves, int nleaves, const void* keys, int64_t n,
              DataType type, bool vectorized);
  void decode(void* out, const Pieces& sums, int p, const void* keys, int64_t n, DataType type,
              ReduceOp op, int64_t leaves, bool vectorized);
  void invariantLocal(void* out, const Pieces& pieces, int p, int64_t n, DataType type, ReduceOp op,
                      bool vectorized);

 private:
  void* scratch(size_t bytes);
  // The pieces as the CPU kernels take them: an array of pointers.
  const void* const* pointers(const Pieces& pieces, int k);

  size_t first_;  // the arena's first buffer of this object
  // Where pointers() puts them: in the object up to kSmall pieces (no allocation for a small
  // call), else on the heap.
  static constexpr int kSmall = 16;
  const void* small_[kSmall];
  std::vector<const void*> pointers_;
};

}  // namespace detcoll::kernels
