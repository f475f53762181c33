#pragma once

// The argument checks of the scatter family, shared by the CPU reference (scatter.cc) and the
// data-parallel formulation (bodies/scatter.h) so that both refuse the same input with the same
// words.

#include <cstdint>
#include <initializer_list>
#include <string>

#include "common/dtype.h"
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

// "[2, 3]".
std::string show(const Shape& shape);

// scatter_add: no negative dimension, dim in range (made non-negative), equal ranks, index no
// larger than src, nor than self outside dim. Messages begin with "scatter_add: ".
Status checkScatterAddShapes(const Shape& self, int* dim, const Shape& index, const Shape& src);

// index_add: source is self with dimension dim of the index's length.
Status checkIndexAddShapes(const Shape& self, int* dim, int64_t indexCount, const Shape& source);

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

// embedding_bag's offsets: 0 = offsets[0] <= offsets[1] <= ... <= count (host memory).
Status checkBagOffsets(const int64_t* offsets, int64_t bags, int64_t count);

// weighted_scatter, before the indices are read: sizes that are not negative, a floating dtype,
// without rows planes of values holding every source, and no null buffer that is read or
// written.
Status checkWeightedScatter(const char* op, const void* out, int64_t planes, int64_t outInner,
                            DataType type, const int64_t* destination, int64_t n,
                            const void* values, int64_t valuesInner, const int64_t* rows);

}  // namespace detcoll::kernels::ops
