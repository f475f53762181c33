#pragma once

// kthvalue and median (kernels/ops/selection.h) on an executor: every element's order key with
// its flat position, a stable radix sort by key, a stable radix sort of the result by slice (so
// each slice's elements are in value order, ties by position), then one body per slice.

#include <cstdint>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/ops/bodies/executor.h"
#include "kernels/ops/bodies/segment.h"
#include "kernels/ops/selection.h"

namespace detcoll::kernels::ops::bodies {

template <typename E>
Status select(E& e, void* values, int64_t* indices, const void* input, DataType type,
              const Selection& s) {
  DETCOLL_RETURN_IF_ERROR(checkSelection(s, type, values, indices, input));
  const int64_t slices = s.outer * s.inner, n = slices * s.length;
  if (slices == 0) return Status::ok();
  uint64_t* keys = e.template alloc<uint64_t>(n);
  uint64_t* sortedKeys = e.template alloc<uint64_t>(n);
  int64_t* positions = e.template alloc<int64_t>(n);
  int64_t* byValue = e.template alloc<int64_t>(n);
  int64_t* bySlice = e.template alloc<int64_t>(n);
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(input);
    e.launch(n, SelectKeyBody<T>{s, x, keys, positions});
    e.sortPairs(keys, sortedKeys, positions, byValue, n, orderKeyBits(type));
    e.launch(n, SliceKeyBody{s, byValue, keys});
    e.sortPairs(keys, sortedKeys, byValue, bySlice, n, keyBits(slices));
    e.launch(slices, PickBody<T>{s, x, bySlice, static_cast<T*>(values), indices});
  });
  return e.status();
}

}  // namespace detcoll::kernels::ops::bodies
