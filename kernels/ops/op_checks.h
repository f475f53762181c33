#pragma once

// The argument checks of the scatter family, shared by the CPU reference (scatter.cc) and the
// data-parallel formulation (bodies/scatter.h) so that both refuse the same input with the same
// words.

#include <cstdint>
#include <initializer_list>
#include <string>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/ops/scatter.h"
#include "kernels/ops/segment.h"

namespace detcoll::kernels::ops {

// The product of shape[from .. to), clamped to the shape.
int64_t product(const Shape& shape, size_t from = 0, size_t to = SIZE_MAX);

// Sizes whose product (and any small multiple of it an op forms: bytes, taps) fits 64-bit
// offsets: an error naming op and the sizes when the product passes 2^56. Negative sizes are
// left to the caller's own check.
Status sizesFit(const std::string& op, std::initializer_list<int64_t> sizes);
Status shapeFits(const std::string& op, const Shape& shape);

// "[2, 3]".
std::string show(const Shape& shape);
// A double as the shortest decimal that reads back as it: "1e-300", "0.5", "2147483647.5".
std::string showNumber(double value);

// scatter_add: no negative dimension, dim in range (made non-negative), equal ranks, index no
// larger than src, nor than self outside dim. Messages begin with "scatter_add: ".
Status checkScatterAddShapes(const Shape& self, int* dim, const Shape& index, const Shape& src);

// index_add: source is self with dimension dim of the index's length.
Status checkIndexAddShapes(const Shape& self, int* dim, int64_t indexCount, const Shape& source);

// index_add's alpha: any for a floating dtype; for an integer dtype, one within its range, as
// torch compares it before it truncates it toward zero (the kernels truncate it so).
Status checkAlpha(const char* op, DataType type, double alpha);

// bincount, before the input is read: sizes, buffers, and int64 for counts (weights null with
// some input) when out is given.
Status checkBincount(DataType type, const int64_t* input, int64_t count, const void* weights,
                     int64_t minlength, const int64_t* outLength, const void* out);
// Its length from the input's largest value (-1: no input): an error where there is no such bin.
Status bincountLength(int64_t largest, int64_t minlength, int64_t* length);

// unsorted_segment_sum / _mean (op names which): the ids' dimensions and the segment count.
Status checkSegmentShapes(const char* op, int64_t segments, const Shape& data, int idDims);

// embedding and embedding_bag backward alike, before the indices are read: a floating dtype and
// sizes that are not negative.
Status checkEmbeddingSizes(const char* op, DataType type, int64_t numWeights, int64_t count,
                           int64_t dim);

// embedding and embedding_bag backward alike: checkEmbeddingSizes, then the indices (paddingIdx,
// when >= 0, is skipped). Gives the skip rule of the padding index.
Status checkEmbedding(const char* op, DataType type, int64_t numWeights, int64_t count, int64_t dim,
                      const int64_t* indices, int64_t paddingIdx, Skip* padding);

// embedding_bag's offsets: 0 = offsets[0] <= offsets[1] <= ... <= count (host memory), the
// first offset that breaks it named.
Status checkBagOffsets(const int64_t* offsets, int64_t bags, int64_t count);
Status badBagOffset(const int64_t* offsets, int64_t at, int64_t count);

// The offset that breaks 0 = offsets[0] <= ... <= count at bag b: b itself (offsets[0] not 0,
// negative, past count) or b + 1 (below offsets[b], past count); -1 where bag b keeps the rule.
// Over every bag, the least is the first that breaks it.
DETCOLL_HOST_DEVICE inline int64_t bagOffsetBreak(const int64_t* offsets, int64_t bags,
                                                  int64_t count, int64_t b) {
  const int64_t begin = offsets[b];
  if ((b == 0 && begin != 0) || begin < 0 || begin > count) return b;
  if (b + 1 < bags && (offsets[b + 1] < begin || offsets[b + 1] > count)) return b + 1;
  return -1;
}

// weighted_scatter, before the indices are read: sizes that are not negative, a floating dtype,
// without rows planes of values holding every source, and no null buffer that is read or
// written.
Status checkWeightedScatter(const char* op, const void* out, int64_t planes, int64_t outInner,
                            DataType type, const int64_t* destination, int64_t n,
                            const void* values, int64_t valuesInner, const int64_t* rows);

}  // namespace detcoll::kernels::ops
