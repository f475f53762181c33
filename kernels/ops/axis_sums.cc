#include "kernels/ops/axis_sums.h"

#include <algorithm>
#include <string>
#include <thread>

#include "kernels/accumulate.h"

namespace detcoll::kernels::ops {
namespace {

using kernels::Traits;
using kernels::visitType;
using kernels::wrapAdd;

template <typename T>
using AccOf = typename Traits<T>::Acc;

// The tree over one output element's sequence: values at base + offsets[j].
template <typename T>
AccOf<T> treeSum(const T* base, const std::vector<int64_t>& offsets, std::vector<AccOf<T>>& sums) {
  using A = AccOf<T>;
  const int64_t k = static_cast<int64_t>(offsets.size());
  if (k == 0) return A{};
  sums.clear();
  for (int64_t start = 0; start < k; start += kChunk) {
    const int64_t end = std::min(k, start + kChunk);
    A s = Traits<T>::load(base[offsets[start]]);
    for (int64_t j = start + 1; j < end; ++j) s = wrapAdd(s, Traits<T>::load(base[offsets[j]]));
    sums.push_back(s);
  }
  while (sums.size() > 1) {
    size_t w = 0;
    for (size_t r = 0; r + 1 < sums.size(); r += 2) sums[w++] = wrapAdd(sums[r], sums[r + 1]);
    if (sums.size() % 2 == 1) sums[w++] = sums.back();
    sums.resize(w);
  }
  return sums[0];
}

template <typename T>
void sumRange(const T* in, const std::vector<int64_t>& outBase, const std::vector<int64_t>& offsets,
              T* out, int64_t first, int64_t last) {
  std::vector<AccOf<T>> sums;
  for (int64_t o = first; o < last; ++o)
    out[o] = Traits<T>::store(treeSum(in + outBase[o], offsets, sums));
}

template <typename T>
void sumAll(const void* in, const std::vector<int64_t>& outBase,
            const std::vector<int64_t>& offsets, void* out, int threads) {
  const int64_t m = static_cast<int64_t>(outBase.size());
  const int64_t work = m * static_cast<int64_t>(offsets.size() + 1);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(
      std::min<int64_t>({threads, 1 + work / (256 << 10), std::max<int64_t>(m, 1)}));
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) {
    workers.emplace_back(sumRange<T>, x, std::cref(outBase), std::cref(offsets), y, m * t / threads,
                         m * (t + 1) / threads);
  }
  sumRange<T>(x, outBase, offsets, y, 0, m / std::max(threads, 1));
  for (std::thread& w : workers) w.join();
}

// Flat offsets of every position of the axes in `which`, row-major over those axes.
std::vector<int64_t> positions(const Shape& shape, const std::vector<int64_t>& strides,
                               const std::vector<bool>& which) {
  std::vector<int64_t> result{0};
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!which[d]) continue;
    std::vector<int64_t> next;
    next.reserve(result.size() * shape[d]);
    for (int64_t base : result) {
      for (int64_t i = 0; i < shape[d]; ++i) next.push_back(base + i * strides[d]);
    }
    result.swap(next);
  }
  return result;
}

}  // namespace

Status planSum(const Shape& shape, std::vector<int> axes, SumPlan* plan) {
  const int rank = static_cast<int>(shape.size());
  std::vector<bool> reduced(shape.size(), false);
  for (int& a : axes) {
    if (a < -rank || a >= rank) {
      return Status::invalidArgument("axis " + std::to_string(a) + " is out of range for " +
                                     std::to_string(rank) + " dimensions");
    }
    if (a < 0) a += rank;
    if (reduced[a]) return Status::invalidArgument("axis " + std::to_string(a) + " appears twice");
    reduced[a] = true;
  }
  for (int64_t d : shape) {
    if (d < 0) return Status::invalidArgument("a negative dimension");
  }
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  std::vector<bool> kept(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) kept[d] = !reduced[d];
  plan->outBase = positions(shape, strides, kept);
  plan->offsets = positions(shape, strides, reduced);
  plan->outputsContiguous = rank == 0 || !reduced[rank - 1];
  return Status::ok();
}

Status sumOverAxes(const void* in, const Shape& shape, DataType type, std::vector<int> axes,
                   void* out, int threads) {
  SumPlan plan;
  DETCOLL_RETURN_IF_ERROR(planSum(shape, std::move(axes), &plan).prefixed("sum"));
  visitType(type, [&](auto tag) {
    sumAll<typename decltype(tag)::type>(in, plan.outBase, plan.offsets, out, threads);
  });
  return Status::ok();
}

Status biasAddAxes(const Shape& shape, bool channelsFirst, std::vector<int>* axes) {
  const int rank = static_cast<int>(shape.size());
  if (rank < 2) {
    return Status::invalidArgument("bias_add_grad: the gradient needs at least 2 dimensions, has " +
                                   std::to_string(rank));
  }
  const int channel = channelsFirst ? 1 : rank - 1;
  axes->clear();
  for (int d = 0; d < rank; ++d) {
    if (d != channel) axes->push_back(d);
  }
  return Status::ok();
}

Status biasAddGrad(const void* grad, const Shape& shape, DataType type, bool channelsFirst,
                   void* out, int threads) {
  std::vector<int> axes;
  DETCOLL_RETURN_IF_ERROR(biasAddAxes(shape, channelsFirst, &axes));
  return sumOverAxes(grad, shape, type, axes, out, threads).prefixed("bias_add_grad");
}

}  // namespace detcoll::kernels::ops
