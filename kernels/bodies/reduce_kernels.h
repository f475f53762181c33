#pragma once

// The allreduce kernels of kernels/bodies/reduce.h launched on an executor of bodies (the GPU's
// DeviceExecutor, or the tests' SerialExecutor), behind the interface the allreduce schedule
// calls (collective/pipeline.h, "Kernels"); kernels/host_reduce_kernels.h is the same interface
// on the CPU's own kernels. Below it, the same kernels on caller buffers given as pointer arrays
// (the device API of kernels/reduce_device.h and the tests).
//
// An Executor offers: alloc<T>(n) (scratch until released or the executor is destroyed),
// mark() and release(mark) (scratch allocated since the mark returned), launch(n, body)
// (body(i) for every i in [0, n), in any order), toDevice(dst, src, bytes) (a copy from host
// memory, done when the host array may be freed), status() (the first failure) and stream() (the
// stream its work is ordered on; null for the host).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/bodies/reduce.h"
#include "kernels/pieces.h"

namespace detcoll::kernels::bodies {

template <typename Executor>
class ReduceKernels {
 public:
  explicit ReduceKernels(Executor& e) : e_(e) {}

  template <typename T>
  T* alloc(int64_t n) {
    return e_.template alloc<T>(n);
  }
  Status status() const { return e_.status(); }
  void* stream() const { return e_.stream(); }
  size_t mark() const { return e_.mark(); }
  void release(size_t mark) { e_.release(mark); }

  // A table of k pointers in memory the executor's kernels read.
  Pieces table(const void* const* pointers, int k) {
    const char** table = e_.template alloc<const char*>(k);
    // From a copy of our own in pageable memory, which the copy has read when it returns: the
    // caller's array may be pinned, where the copy would read it later.
    const std::vector<const void*> copy(pointers, pointers + k);
    e_.toDevice(table, copy.data(), static_cast<size_t>(k) * sizeof(void*));
    Pieces pieces;
    pieces.table = table;
    return pieces;
  }

  // out = the rank-order fold of k pieces (kernels::foldRankOrder). vectorized: every piece and
  // out are 16-byte aligned.
  void fold(void* out, const Pieces& pieces, int k, int64_t n, DataType type, ReduceOp op,
            int64_t divisor, bool vectorized) {
    visitType(type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = typename Traits<T>::Acc;
      visitCombine(op, [&](auto combine, auto average) {
        FoldBody<T, decltype(combine), decltype(average)::value> body{
            pieces, k, static_cast<T*>(out), n, static_cast<A>(divisor), vectorized};
        e_.launch(vectorsOf<T>(n), body);
      });
    });
  }

  // keys = the largest key of each element over the leaves (kernels::localMaxKeys).
  void localKeys(void* keys, const Pieces& leaves, int nleaves, int64_t n, DataType type,
                 bool vectorized) {
    visitFloatType(type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      e_.launch(vectorsOf<T>(n),
                KeysBody<T>{leaves, nleaves, static_cast<KeyOf<T>*>(keys), n, vectorized});
    });
  }

  // out = the largest of p key arrays (kernels::foldMaxKeys); out may alias a piece.
  void foldKeys(void* out, const Pieces& pieces, int p, int64_t n, DataType type) {
    visitFloatType(type, [&](auto tag) {
      using K = KeyOf<typename decltype(tag)::type>;
      e_.launch(n, MaxKeysBody<K>{pieces, p, static_cast<K*>(out)});
    });
  }

  // out = the sum of the leaves' contributions on the keys' grids (kernels::encodeLeaves).
  void encode(int64_t* out, const Pieces& leaves, int nleaves, const void* keys, int64_t n,
              DataType type, bool vectorized) {
    visitType(type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      e_.launch(vectorsOf<T>(n), EncodeBody<T>{leaves, nleaves, keys, out, n, vectorized});
    });
  }

  // out = the decoded exact sum of p int64 pieces (kernels::decodeSums); vectorized: out is
  // 16-byte aligned (the pieces are read element by element).
  void decode(void* out, const Pieces& sums, int p, const void* keys, int64_t n, DataType type,
              ReduceOp op, int64_t leaves, bool vectorized) {
    visitType(type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      e_.launch(vectorsOf<T>(n), DecodeBody<T>{sums, p, keys, static_cast<T*>(out), n,
                                               op == ReduceOp::kAverage, leaves, vectorized});
    });
  }

  // The invariant reduction of p pieces held here (kernels::invariantReduceLocal): sum and
  // average exactly, min and max by the (order-independent) fold.
  void invariantLocal(void* out, const Pieces& pieces, int p, int64_t n, DataType type, ReduceOp op,
                      bool vectorized) {
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
      return fold(out, pieces, p, n, type, op, 1, vectorized);
    }
    visitType(type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      e_.launch(vectorsOf<T>(n), InvariantLocalBody<T>{pieces, p, static_cast<T*>(out), n,
                                                       op == ReduceOp::kAverage, vectorized});
    });
  }

 private:
  // Visits a float storage type (integers have no keys).
  template <typename F>
  static void visitFloatType(DataType type, F&& f) {
    visitType(type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (isFloatingStorage<T>()) f(tag);
    });
  }

  Executor& e_;
};

// ---- the kernels on caller buffers (pointer arrays of the executor's memory) -------------------

// Whether every pointer of the array (and `also`) is 16-byte aligned.
inline bool allAligned(const void* const* pointers, int k, const void* also) {
  bool aligned = aligned16({also});
  for (int j = 0; j < k; ++j) aligned = aligned && aligned16({pointers[j]});
  return aligned;
}

template <typename Executor>
void foldRankOrder(Executor& e, void* out, const void* const* inputs, int k, size_t count,
                   DataType type, ReduceOp op, int64_t divisor) {
  ReduceKernels<Executor> r(e);
  r.fold(out, r.table(inputs, k), k, static_cast<int64_t>(count), type, op, divisor,
         allAligned(inputs, k, out));
}

template <typename Executor>
void localMaxKeys(Executor& e, void* keys, const void* const* leaves, int nleaves, size_t n,
                  DataType type) {
  ReduceKernels<Executor> r(e);
  r.localKeys(keys, r.table(leaves, nleaves), nleaves, static_cast<int64_t>(n), type,
              allAligned(leaves, nleaves, nullptr));
}

template <typename Executor>
void foldMaxKeys(Executor& e, void* out, const void* const* pieces, int p, size_t n,
                 DataType type) {
  ReduceKernels<Executor> r(e);
  r.foldKeys(out, r.table(pieces, p), p, static_cast<int64_t>(n), type);
}

template <typename Executor>
void encodeLeaves(Executor& e, int64_t* out, const void* const* leaves, int nleaves,
                  const void* keys, size_t n, DataType type) {
  ReduceKernels<Executor> r(e);
  r.encode(out, r.table(leaves, nleaves), nleaves, keys, static_cast<int64_t>(n), type,
           allAligned(leaves, nleaves, nullptr));
}

template <typename Executor>
void decodeSums(Executor& e, void* out, const int64_t* const* pieces, int p, const void* keys,
                size_t n, DataType type, ReduceOp op, int64_t leaves) {
  ReduceKernels<Executor> r(e);
  r.decode(out, r.table(reinterpret_cast<const void* const*>(pieces), p), p, keys,
           static_cast<int64_t>(n), type, op, leaves, aligned16({out}));
}

template <typename Executor>
void invariantReduceLocal(Executor& e, void* out, const void* const* leaves, int nleaves,
                          size_t count, DataType type, ReduceOp op) {
  ReduceKernels<Executor> r(e);
  r.invariantLocal(out, r.table(leaves, nleaves), nleaves, static_cast<int64_t>(count), type, op,
                   allAligned(leaves, nleaves, out));
}

}  // namespace detcoll::kernels::bodies
