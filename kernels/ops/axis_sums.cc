#include "kernels/ops/axis_sums.h"

#include <algorithm>
#include <string>
#include <thread>

#include "kernels/accumulate.h"
#include "kernels/ops/for_each_index.h"
#include "kernels/ops/op_checks.h"

namespace detcoll::kernels::ops {
namespace {

using kernels::Traits;
using kernels::visitType;
using kernels::wrapAdd;
using tree::kLanes;
using tree::laneSums;
using tree::pairwise;

template <typename T>
using AccOf = typename Traits<T>::Acc;

// Outputs [first, last). Strided plans take their chunks kLanes at a time: chunks of one output,
// or the same chunk of kLanes consecutive outputs where the outputs are contiguous.
template <typename T>
void sumRange(const T* in, const SumPlan& plan, T* out, int64_t first, int64_t last) {
  using A = AccOf<T>;
  const int64_t k = plan.count, chunks = (k + kChunk - 1) / kChunk, full = k / kChunk;
  if (k == 0) {
    for (int64_t o = first; o < last; ++o) out[o] = Traits<T>::store(A{});
    return;
  }
  const int64_t step = plan.stride, span = kChunk * step;
  std::vector<A> sums(static_cast<size_t>(chunks * kLanes));
  const T* lane[kLanes];
  if (step > 0 && plan.outputsContiguous) {
    for (int64_t o = first; o < last; o += kLanes) {
      const int lanes = static_cast<int>(std::min<int64_t>(kLanes, last - o));
      for (int64_t i = 0; i < chunks; ++i) {  // sums[l · chunks + i]: chunk i of output o + l
        for (int l = 0; l < lanes; ++l) lane[l] = in + plan.outBase[o + l] + i * span;
        A s[kLanes];
        laneSums(lane, lanes, step, i < full ? kChunk : k - full * kChunk, s);
        for (int l = 0; l < lanes; ++l) sums[l * chunks + i] = s[l];
      }
      for (int l = 0; l < lanes; ++l)
        out[o + l] = Traits<T>::store(pairwise(&sums[l * chunks], chunks));
    }
    return;
  }
  for (int64_t o = first; o < last; ++o) {
    const T* base = in + plan.outBase[o];
    int64_t i = 0;
    if (step > 0) {
      for (; i + kLanes <= full; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) lane[l] = base + (i + l) * span;
        laneSums(lane, kLanes, step, kChunk, &sums[i]);
      }
    }
    for (; i < chunks; ++i) {  // the rest, one chunk at a time
      const int64_t end = std::min(k, (i + 1) * kChunk);
      A s = Traits<T>::load(base[plan.offset(i * kChunk)]);
      for (int64_t j = i * kChunk + 1; j < end; ++j)
        s = wrapAdd(s, Traits<T>::load(base[plan.offset(j)]));
      sums[i] = s;
    }
    out[o] = Traits<T>::store(pairwise(sums.data(), chunks));
  }
}

template <typename T>
void sumAll(const void* in, const SumPlan& plan, void* out, int threads) {
  const int64_t m = static_cast<int64_t>(plan.outBase.size());
  const int64_t work = m * (plan.count + 1);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(
      std::min<int64_t>({threads, 1 + work / (256 << 10), std::max<int64_t>(m, 1)}));
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  onThreads(threads,
            [&](int t) { sumRange<T>(x, plan, y, m * t / threads, m * (t + 1) / threads); });
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
  DETCOLL_RETURN_IF_ERROR(shapeFits("input", shape));
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  std::vector<bool> kept(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) kept[d] = !reduced[d];
  plan->outBase = positions(shape, strides, kept);
  // The reduced axes of more than one element, adjacent ones merged: one run is one stride.
  int runs = 0, innermost = -1;
  plan->count = 1;
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d]) continue;
    plan->count *= shape[d];
    if (shape[d] == 1) continue;
    const bool joins = innermost >= 0 && strides[innermost] == shape[d] * strides[d];
    if (!joins) ++runs;
    innermost = d;
  }
  plan->offsets.clear();
  plan->stride = 0;
  if (plan->count > 0 && runs <= 1) plan->stride = innermost >= 0 ? strides[innermost] : 1;
  if (plan->count > 0 && plan->stride <= 0) {  // several runs (or no output at all)
    plan->stride = 0;
    plan->offsets = positions(shape, strides, reduced);
  }
  plan->outputsContiguous = rank == 0 || !reduced[rank - 1];
  return Status::ok();
}

Status checkSumBuffers(const SumPlan& plan, const void* in, const void* out) {
  const bool outputs = !plan.outBase.empty();
  if (outputs && out == nullptr) return Status::invalidArgument("the output is null");
  if (outputs && plan.count > 0 && in == nullptr) {
    return Status::invalidArgument("the input is null");
  }
  return Status::ok();
}

Status sumOverAxes(const void* in, const Shape& shape, DataType type, std::vector<int> axes,
                   void* out, int threads) {
  SumPlan plan;
  DETCOLL_RETURN_IF_ERROR(planSum(shape, std::move(axes), &plan).prefixed("sum"));
  DETCOLL_RETURN_IF_ERROR(checkSumBuffers(plan, in, out).prefixed("sum"));
  visitType(type, [&](auto tag) { sumAll<typename decltype(tag)::type>(in, plan, out, threads); });
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
