#pragma once

// The deterministic scatter family on the CPU: the reference that defines each op's bits (the
// CUDA kernels must match them). Every op is the segment engine (segment.h): each destination's
// sources are reduced in increasing source position, in the accumulation type (float for float32,
// float16 and bfloat16, double for float64, int64 for integers), rounded once. Tensors are
// contiguous, row-major; shapes are given as dimension lists. `threads` <= 0 uses the hardware's;
// the bits never depend on it. Bad input (an index out of range, shapes that do not fit) is an
// InvalidArgument status naming the op and the problem, with the output untouched.

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::kernels::ops {

using Shape = std::vector<int64_t>;

// torch.Tensor.scatter_add_(dim, index, src): self[..., index[p], ...] += src[p] for every
// position p of index (index.size(d) <= src.size(d) for all d, <= self.size(d) for d != dim).
// Sources are numbered by p in row-major order.
Status scatterAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                  const Shape& indexShape, const void* src, const Shape& srcShape, int threads);

// torch.Tensor.index_add_(dim, index, source, alpha): self.select(dim, index[i]) +=
// alpha * source.select(dim, i); the sources of one destination in increasing i.
Status indexAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                int64_t indexCount, const void* source, const Shape& sourceShape, double alpha,
                int threads);

// tf.math.unsorted_segment_sum / _mean: out[k] = the sum (mean) of data[i] over the i with
// segmentIds[i] == k (ids index data's first idDims dimensions, row-major); negative ids are
// dropped; out has shape [segments] + data's remaining dimensions; an empty segment is 0.
Status unsortedSegmentReduce(void* out, int64_t segments, DataType type, const void* data,
                             const Shape& dataShape, const int64_t* segmentIds, int idDims,
                             bool mean, int threads);

// torch.nn.functional.embedding's backward (dense): gradWeight[numWeights, D] = the sum over
// positions i (indices flattened, row-major) of gradOutput[i] into row indices[i], skipping
// paddingIdx (< 0: none); with scaleGradByFreq each term is scaled by 1 / (the number of
// occurrences of its index), computed in the accumulation type.
Status embeddingBackward(void* gradWeight, int64_t numWeights, DataType type,
                         const void* gradOutput, int64_t count, int64_t dim, const int64_t* indices,
                         int64_t paddingIdx, bool scaleGradByFreq, int threads);

// torch.nn.functional.embedding_bag's backward for mode sum or mean (1-D indices and offsets,
// include_last_offset false): position k belongs to bag b (offsets[b] <= k < offsets[b + 1]) and
// adds gradOutput[b], times perSampleWeights[k] (sum mode, optional, same dtype), or divided by
// the bag's number of non-padding indices (mean mode, the division's factor 1 / size formed in
// the accumulation type), into row indices[k] of gradWeight; paddingIdx (< 0: none) is skipped.
Status embeddingBagBackward(void* gradWeight, int64_t numWeights, DataType type,
                            const void* gradOutput, int64_t bags, int64_t dim,
                            const int64_t* indices, int64_t count, const int64_t* offsets,
                            bool mean, const void* perSampleWeights, int64_t paddingIdx,
                            int threads);

// torch.bincount(input, weights, minlength): out[v] = the sum of weights[i] over input[i] == v,
// for out of length max(minlength, max(input) + 1) (0 for an empty input and minlength 0);
// input must be non-negative. outLength reports that length: call with out == nullptr to learn
// it.
Status bincount(void* out, int64_t* outLength, DataType type, const int64_t* input, int64_t count,
                const void* weights, int64_t minlength, int threads);

// The adjoint of a weighted gather, plane by plane (the backward of padding, pooling,
// interpolation and grid sampling, whose forward reads input position destination[s] into output
// position rows[s] with weight weights[s]): out is [planes, outInner] and values [planes,
// valuesInner]; out[p][d] = the sum, over the sources s = 0 .. n - 1 with destination[s] = d in
// increasing s, of weights[s] * values[p][rows[s]] (rows null: s; weights null: 1), from 0, in
// the accumulation type, rounded once. weights are in the accumulation type (float for float32,
// float16 and bfloat16, double for float64). Floating-point dtypes only.
Status weightedScatter(void* out, int64_t planes, int64_t outInner, DataType type,
                       const int64_t* destination, int64_t n, const void* values,
                       int64_t valuesInner, const int64_t* rows, const void* weights, int threads);

// tf.sparse.sparse_dense_matmul: out [outRows, columns] = A · dense, A the nnz entries (rows[k],
// cols[k], values[k]) and dense [denseRows, columns]; out[r][j] = the sum, over the k with rows[k]
// = r in increasing k, of values[k] · dense[cols[k]][j], from 0, in the accumulation type
// (values converted to it exactly), rounded once. Floating-point dtypes; values in the dtype.
Status sparseDenseMatmul(void* out, int64_t outRows, DataType type, const int64_t* rows,
                         const int64_t* cols, const void* values, int64_t nnz, const void* dense,
                         int64_t denseRows, int64_t columns, int threads);
Status checkSparseDense(void* out, int64_t outRows, DataType type, const int64_t* rows,
                        const int64_t* cols, const void* values, int64_t nnz, const void* dense,
                        int64_t denseRows, int64_t columns);

}  // namespace detcoll::kernels::ops
