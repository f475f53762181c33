#include "kernels/ops/selection.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops/for_each_index.h"
#include "kernels/ops/op_checks.h"

namespace detcoll::kernels::ops {

Status checkSelection(const Selection& s, DataType type, const void* values, const int64_t* indices,
                      const void* input) {
  const std::string op = s.median ? "median: " : "kthvalue: ";
  if (!isValidDataType(static_cast<int>(type))) {
    return Status::invalidArgument(op + "unknown dtype");
  }
  if (s.outer < 0 || s.length < 0 || s.inner < 0) {
    return Status::invalidArgument(op + "negative size");
  }
  DETCOLL_RETURN_IF_ERROR(sizesFit(s.median ? "median" : "kthvalue", {s.outer, s.length, s.inner}));
  const int64_t slices = s.outer * s.inner;
  if (slices > 0 && (s.k < 1 || s.k > s.length)) {
    return Status::invalidArgument(op + "k = " + std::to_string(s.k) +
                                   " is out of range for a dimension of " +
                                   std::to_string(s.length) + " elements");
  }
  if (slices > 0 && (values == nullptr || indices == nullptr || input == nullptr)) {
    return Status::invalidArgument(op + "values, indices or input is null");
  }
  return Status::ok();
}

Status select(void* values, int64_t* indices, const void* input, DataType type, const Selection& s,
              int threads) {
  DETCOLL_RETURN_IF_ERROR(checkSelection(s, type, values, indices, input));
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(input);
    forEachRange(s.outer * s.inner, threads, 1 + s.outer * s.inner * s.length / (64 << 10),
                 [&](int64_t first, int64_t last) {
                   std::vector<std::pair<uint64_t, int64_t>> slice(static_cast<size_t>(s.length));
                   for (int64_t q = first; q < last; ++q) {
                     const int64_t o = q / s.inner, r = q % s.inner;
                     const T* base = x + o * s.length * s.inner + r;
                     int64_t firstNaN = -1;
                     for (int64_t j = 0; j < s.length; ++j) {
                       slice[j] = {orderKey(base[j * s.inner]), j};
                       if (firstNaN < 0 && isNaNValue(base[j * s.inner])) firstNaN = j;
                     }
                     if (s.median && firstNaN >= 0) {
                       static_cast<T*>(values)[q] =
                           Traits<T>::store(Traits<T>::load(base[firstNaN * s.inner]));
                       indices[q] = firstNaN;
                       continue;
                     }
                     // (key, position) is a total order: its k-th is the stable order's.
                     std::nth_element(slice.begin(), slice.begin() + (s.k - 1), slice.end());
                     const int64_t j = slice[s.k - 1].second;
                     static_cast<T*>(values)[q] = base[j * s.inner];
                     indices[q] = j;
                   }
                 });
  });
  return Status::ok();
}

}  // namespace detcoll::kernels::ops
