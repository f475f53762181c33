#pragma once

// Sums over axes and bias_add's gradient (kernels/ops/axis_sums.h) on an executor
// (bodies/executor.h): the same fixed tree, as chunk sums of kChunk values, then pairwise
// levels, one launch a level.

#include <cstdint>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/accumulate.h"
#include "kernels/ops/axis_sums.h"
#include "kernels/ops/bodies/executor.h"

namespace detcoll::kernels::ops::bodies {

// The tree of axis_sums.h. Chunk sums: element (i, o) of sums[chunks][m] is chunk i of output o.
// oFastest puts consecutive outputs in consecutive threads (coalesced when outputs are
// contiguous in the input); otherwise consecutive chunks are.
template <typename T>
struct ChunkSumBody {
  using A = typename kernels::Traits<T>::Acc;
  const T* in;
  const int64_t* outBase;
  const int64_t* offsets;  // null: element j at j · stride
  int64_t stride, k, m, chunks;
  bool oFastest;
  A* sums;

  DETCOLL_HOST_DEVICE int64_t at(int64_t j) const {
    return offsets != nullptr ? offsets[j] : j * stride;
  }
  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t i = oFastest ? t / m : t % chunks, o = oFastest ? t % m : t / chunks;
    const T* base = in + outBase[o];
    const int64_t start = i * kChunk, end = start + kChunk < k ? start + kChunk : k;
    A s = kernels::Traits<T>::load(base[at(start)]);
    for (int64_t j = start + 1; j < end; ++j) {
      s = kernels::wrapAdd(s, kernels::Traits<T>::load(base[at(j)]));
    }
    sums[i * m + o] = s;
  }
};

// One pairwise level: next[i][o] = sums[2i][o] + sums[2i + 1][o], an odd last passed up.
template <typename A>
struct PairLevelBody {
  const A* sums;
  int64_t count, m;
  A* next;
  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t i = t / m, o = t % m;
    next[t] = 2 * i + 1 < count ? kernels::wrapAdd(sums[2 * i * m + o], sums[(2 * i + 1) * m + o])
                                : sums[2 * i * m + o];
  }
};

template <typename T>
struct RoundBody {
  const typename kernels::Traits<T>::Acc* sums;  // null: every output is an empty sum
  T* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t o) const {
    using A = typename kernels::Traits<T>::Acc;
    out[o] = kernels::Traits<T>::store(sums != nullptr ? sums[o] : A{});
  }
};

template <typename E>
Status sumOverAxes(E& e, const void* in, const Shape& shape, DataType type, std::vector<int> axes,
                   void* out) {
  SumPlan plan;
  DETCOLL_RETURN_IF_ERROR(planSum(shape, std::move(axes), &plan).prefixed("sum"));
  DETCOLL_RETURN_IF_ERROR(checkSumBuffers(plan, in, out).prefixed("sum"));
  const int64_t m = static_cast<int64_t>(plan.outBase.size());
  const int64_t k = plan.count;
  if (m == 0) return Status::ok();
  Status status;
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = typename kernels::Traits<T>::Acc;
    if (k == 0) {
      e.launch(m, RoundBody<T>{nullptr, static_cast<T*>(out)});
      status = e.status();
      return;
    }
    int64_t* outBase = e.template alloc<int64_t>(m);
    e.toDevice(outBase, plan.outBase.data(), m * sizeof(int64_t));
    int64_t* offsets = nullptr;
    if (plan.stride == 0) {
      offsets = e.template alloc<int64_t>(k);
      e.toDevice(offsets, plan.offsets.data(), k * sizeof(int64_t));
    }
    int64_t chunks = (k + kChunk - 1) / kChunk;
    A* sums = e.template alloc<A>(chunks * m);
    e.launch(chunks * m, ChunkSumBody<T>{static_cast<const T*>(in), outBase, offsets, plan.stride,
                                         k, m, chunks, plan.outputsContiguous, sums});
    if (chunks > 1) {
      A* next = e.template alloc<A>(((chunks + 1) / 2) * m);
      while (chunks > 1) {
        const int64_t up = (chunks + 1) / 2;
        e.launch(up * m, PairLevelBody<A>{sums, chunks, m, next});
        std::swap(sums, next);
        chunks = up;
      }
    }
    e.launch(m, RoundBody<T>{sums, static_cast<T*>(out)});
    status = e.status();
  });
  return status;
}

template <typename E>
Status biasAddGrad(E& e, const void* grad, const Shape& shape, DataType type, bool channelsFirst,
                   void* out) {
  std::vector<int> axes;
  DETCOLL_RETURN_IF_ERROR(biasAddAxes(shape, channelsFirst, &axes));
  return sumOverAxes(e, grad, shape, type, axes, out).prefixed("bias_add_grad");
}

}  // namespace detcoll::kernels::ops::bodies
