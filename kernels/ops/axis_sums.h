#pragma once

// Sums over axes with a fixed tree (bias_add backward is one): the bits do not depend on
// threads, blocks or any launch configuration.
//
// For each output element, its sequence x_0 .. x_{k-1} is the input elements it sums, in
// row-major order over the reduced axes. The sequence is cut into chunks of kChunk consecutive
// values; each chunk is summed left to right from its first value; the chunk sums are then added
// pairwise, level by level ((s_0 + s_1), (s_2 + s_3), ...; an odd last sum passes up unchanged)
// until one remains. All of it in the accumulation type (float for float32, float16 and
// bfloat16, inputs converted exactly; double for float64; int64 for integers), rounded once to
// the dtype. An empty sequence sums to 0.

#include <array>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/accumulate.h"
#include "kernels/ops/scatter.h"

namespace detcoll::kernels::ops {

constexpr int64_t kChunk = 32;

namespace tree {

// Chunk sums of `lanes` sequences at once, each summed left to right on its own, so the adds of
// different lanes overlap (the bits are each lane's own). Lane l's values are at
// first[l] + j · step, j < length.
constexpr int kLanes = 8;

template <typename T>
void laneSums(const T* const* first, int lanes, int64_t step, int64_t length,
              typename Traits<T>::Acc* sums) {
  typename Traits<T>::Acc s[kLanes];
  for (int l = 0; l < lanes; ++l) s[l] = Traits<T>::load(first[l][0]);
  for (int64_t j = 1; j < length; ++j) {
    for (int l = 0; l < lanes; ++l) s[l] = wrapAdd(s[l], Traits<T>::load(first[l][j * step]));
  }
  for (int l = 0; l < lanes; ++l) sums[l] = s[l];
}

// The pairwise levels over sums[0 .. count) (count >= 1), in place; the total.
template <typename A>
A pairwise(A* sums, int64_t count) {
  while (count > 1) {
    int64_t w = 0;
    for (int64_t r = 0; r + 1 < count; r += 2) sums[w++] = wrapAdd(sums[r], sums[r + 1]);
    if (count % 2 == 1) sums[w++] = sums[count - 1];
    count = w;
  }
  return sums[0];
}

}  // namespace tree

// The trees over N sequences of k values each, made as they are summed: fill(start, count, into)
// writes values start .. start + count - 1 of sequence q to into[q][0 .. count), kLanes chunks at
// a time, so the values never exist all at once. The same bits as sumOverAxes of each sequence,
// stored to the dtype.
template <typename T, int N, typename Fill>
std::array<T, N> sumsAsMade(int64_t k, const Fill& fill) {
  using A = typename Traits<T>::Acc;
  constexpr int64_t kBlock = tree::kLanes * kChunk;
  std::array<T, N> result;
  if (k == 0) {
    result.fill(Traits<T>::store(A{}));
    return result;
  }
  const size_t chunks = static_cast<size_t>((k + kChunk - 1) / kChunk);
  std::vector<A> sums(N * chunks);
  T blocks[N][kBlock];
  T* into[N];
  for (int q = 0; q < N; ++q) into[q] = blocks[q];
  const T* lane[tree::kLanes];
  for (int64_t start = 0; start < k; start += kBlock) {
    const int64_t count = k - start < kBlock ? k - start : kBlock;
    fill(start, count, into);
    const int64_t full = count / kChunk, first = start / kChunk;
    for (int q = 0; q < N; ++q) {
      A* to = &sums[q * chunks + first];
      for (int64_t l = 0; l < full; ++l) lane[l] = blocks[q] + l * kChunk;
      if (full > 0) tree::laneSums(lane, static_cast<int>(full), 1, kChunk, to);
      if (count % kChunk != 0) {  // the last, partial chunk
        const T* rest = blocks[q] + full * kChunk;
        tree::laneSums(&rest, 1, 1, count % kChunk, to + full);
      }
    }
  }
  for (int q = 0; q < N; ++q) {
    result[q] = Traits<T>::store(tree::pairwise(&sums[q * chunks], static_cast<int64_t>(chunks)));
  }
  return result;
}

// out has the input's shape without the reduced axes (each axis at most once; negative axes
// count from the end). An empty axes list reduces nothing (a copy in the dtype).
Status sumOverAxes(const void* in, const Shape& shape, DataType type, std::vector<int> axes,
                   void* out, int threads);

// Where each output's sequence starts in the input (outBase, one per output, row-major over the
// kept axes) and where its `count` elements lie from there (row-major over the reduced axes;
// count 0 when a reduced axis is empty): element j at j · stride where the reduced axes are one
// run of adjacent axes (stride > 0, offsets empty), otherwise at offsets[j].
// outputsContiguous: consecutive outputs are consecutive inputs.
struct SumPlan {
  std::vector<int64_t> outBase, offsets;
  int64_t count = 0, stride = 0;
  bool outputsContiguous = false;
  int64_t offset(int64_t j) const { return stride > 0 ? j * stride : offsets[j]; }
};
Status planSum(const Shape& shape, std::vector<int> axes, SumPlan* plan);

// The buffers a plan reads and writes: the input where some output sums something, the output
// where there is one.
Status checkSumBuffers(const SumPlan& plan, const void* in, const void* out);

// The axes bias_add's gradient sums: all but the channel axis.
Status biasAddAxes(const Shape& shape, bool channelsFirst, std::vector<int>* axes);

// tf.nn.bias_add's gradient: the sum over every axis but the channel axis, which is the last
// (NHWC, channels last) or axis 1 (NCHW).
Status biasAddGrad(const void* grad, const Shape& shape, DataType type, bool channelsFirst,
                   void* out, int threads);

}  // namespace detcoll::kernels::ops
