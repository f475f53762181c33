#pragma once

// The serial executor: the host running the device's data-parallel bodies (kernels/ops/bodies/,
// kernels/bodies/) one grid index at a time, so that CI, which has no GPU, tests the very
// formulation the GPU runs. Scratch from the heap, a body called for each index in turn (so the
// grid's indices run in an order no GPU would use, which the bits must not notice: the indices run
// backwards), a stable sort in place of the device's radix sort. Tests only.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "common/status.h"

namespace detcoll::testing {

class SerialExecutor {
 public:
  template <typename T>
  T* alloc(int64_t n) {
    buffers_.push_back(std::make_unique<unsigned char[]>(std::max<int64_t>(n, 1) * sizeof(T)));
    return reinterpret_cast<T*>(buffers_.back().get());
  }

  size_t mark() const { return buffers_.size(); }
  void release(size_t mark) { buffers_.resize(std::min(mark, buffers_.size())); }

  template <typename Body>
  void launch(int64_t n, const Body& body) {
    for (int64_t i = n; i-- > 0;) body(i);
  }

  template <typename K, typename V>
  void sortPairs(const K* keysIn, K* keysOut, const V* valuesIn, V* valuesOut, int64_t n,
                 int endBit) {
    const K mask =
        endBit >= static_cast<int>(8 * sizeof(K)) ? ~K{0} : static_cast<K>((K{1} << endBit) - 1);
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return (keysIn[a] & mask) < (keysIn[b] & mask); });
    for (int64_t i = 0; i < n; ++i) {
      keysOut[i] = keysIn[order[i]];
      valuesOut[i] = valuesIn[order[i]];
    }
  }

  void toHost(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
  void toDevice(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

  void minMax(const int64_t* x, int64_t n, int64_t* lo, int64_t* hi) {
    const auto [a, b] = std::minmax_element(x, x + n);
    *lo = *a;
    *hi = *b;
  }

  Status status() const { return Status::ok(); }
  void* stream() const { return nullptr; }

 private:
  std::vector<std::unique_ptr<unsigned char[]>> buffers_;
};

}  // namespace detcoll::testing
