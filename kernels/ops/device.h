#pragma once

// The deterministic ops on a CUDA device: the data-parallel formulation of bodies/ (every family
// listed in bodies/executor.h), launched as kernels, with CUB's
// radix sort for the segment engine. The bits equal the CPU reference's (scatter.h, axis_sums.h,
// resample.h) for every dtype and launch configuration. Built only with CUDA.
//
// Tensors are device memory; shapes and parameters are host values. Work is enqueued on
// `stream` (a cudaStream_t; null: the legacy default stream). A call that validates indices
// (the scatter family, max_pool2d's backward) or learns a size (bincount) waits for that check on
// the stream before it enqueues the rest; everything else returns without waiting. A bad index
// gives the CPU reference's error, word for word, with the output untouched; a CUDA failure is
// DETCOLL_ERR_BACKEND naming the call.

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/ops/crop.h"
#include "kernels/ops/ctc.h"
#include "kernels/ops/cubic.h"
#include "kernels/ops/grid_sample.h"
#include "kernels/ops/losses.h"
#include "kernels/ops/resample.h"
#include "kernels/ops/scatter.h"
#include "kernels/ops/selection.h"
#include "kernels/ops/taps.h"
#include "kernels/ops/writes.h"

namespace detcoll::kernels::ops::device {

Status scatterAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                  const Shape& indexShape, const void* src, const Shape& srcShape, void* stream);
Status indexAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                int64_t indexCount, const void* source, const Shape& sourceShape, double alpha,
                void* stream);
Status unsortedSegmentReduce(void* out, int64_t segments, DataType type, const void* data,
                             const Shape& dataShape, const int64_t* segmentIds, int idDims,
                             bool mean, void* stream);
Status embeddingBackward(void* gradWeight, int64_t numWeights, DataType type,
                         const void* gradOutput, int64_t count, int64_t dim, const int64_t* indices,
                         int64_t paddingIdx, bool scaleGradByFreq, void* stream);
Status embeddingBagBackward(void* gradWeight, int64_t numWeights, DataType type,
                            const void* gradOutput, int64_t bags, int64_t dim,
                            const int64_t* indices, int64_t count, const int64_t* offsets,
                            bool mean, const void* perSampleWeights, int64_t paddingIdx,
                            void* stream);
Status bincount(void* out, int64_t* outLength, DataType type, const int64_t* input, int64_t count,
                const void* weights, int64_t minlength, void* stream);
Status sparseDenseMatmul(void* out, int64_t outRows, DataType type, const int64_t* rows,
                         const int64_t* cols, const void* values, int64_t nnz, const void* dense,
                         int64_t denseRows, int64_t columns, void* stream);
Status weightedScatter(void* out, int64_t planes, int64_t outInner, DataType type,
                       const int64_t* destination, int64_t n, const void* values,
                       int64_t valuesInner, const int64_t* rows, const void* weights, void* stream);
Status padBackward(void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                   const Shape& inputSpatial, const std::vector<int64_t>& padding, bool reflect,
                   void* stream);
Status upsampleLinearBackward(void* gradInput, const void* gradOutput, DataType type,
                              int64_t planes, const Shape& inputSpatial, const Shape& outputSpatial,
                              bool alignCorners, const std::vector<double>& scales, void* stream);
Status avgPoolBackward(void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                       const Shape& inputSpatial, const AvgPool& pool, void* stream);
Status adaptiveAvgPoolBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, void* stream);
Status maxPoolBackward(void* gradInput, const void* gradOutput, const int64_t* indices,
                       DataType type, int64_t planes, int64_t inner, int64_t outputs, void* stream);
Status upsampleBicubicBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, bool alignCorners,
                               const std::vector<double>& scales, void* stream);
Status writeLast(void* out, int64_t rows, int64_t width, DataType type, const int64_t* destination,
                 int64_t n, const void* values, void* stream);
Status maxUnpool(void* out, const void* input, const int64_t* indices, DataType type,
                 int64_t planes, int64_t inputs, int64_t outputs, void* stream);
Status histc(void* out, DataType type, const void* input, int64_t n, int64_t bins, double min,
             double max, void* stream);
Status embeddingBagMaxBackward(void* gradWeight, int64_t numWeights, DataType type,
                               const void* gradOutput, int64_t bags, int64_t dim,
                               const int64_t* maximumIndices, const int64_t* bagSize,
                               int64_t paddingIdx, void* stream);
Status gridSamplerBackward(void* gradInput, void* gradGrid, const void* gradOutput,
                           const void* input, const void* gridValues, DataType type,
                           const GridSample& s, void* stream);
Status ctcLossBackward(void* gradLogProbs, const void* grad, const void* logProbs,
                       const int64_t* targets, const int64_t* inputLengths,
                       const int64_t* targetLengths, const void* nll, const void* logAlpha,
                       DataType type, const Ctc& ctc, void* stream);
Status nllLoss(void* output, void* totalWeight, const void* input, const int64_t* target,
               const void* weight, DataType type, const NllLoss& l, void* stream);
Status select(void* values, int64_t* indices, const void* input, DataType type, const Selection& s,
              void* stream);
Status cropAndResize(void* out, const void* image, const void* boxes, const int64_t* boxIndices,
                     DataType type, const Crop& c, void* stream);
Status cropAndResizeBackward(void* gradImage, void* gradBoxes, const void* grads, const void* image,
                             const void* boxes, const int64_t* boxIndices, DataType type,
                             const Crop& c, void* stream);
Status upsampleNearestBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, const std::vector<double>& scales,
                               void* stream);
Status sumOverAxes(const void* in, const Shape& shape, DataType type, std::vector<int> axes,
                   void* out, void* stream);
Status biasAddGrad(const void* grad, const Shape& shape, DataType type, bool channelsFirst,
                   void* out, void* stream);
Status bilinear2dBackward(void* gradInput, const void* gradOutput, DataType type,
                          const Bilinear& shape, void* stream);
Status maxPool2d(void* out, int64_t* indices, const void* in, DataType type, const Pool2d& pool,
                 void* stream);
Status maxPool2dBackward(void* gradInput, const void* gradOutput, const int64_t* indices,
                         DataType type, const Pool2d& pool, void* stream);

}  // namespace detcoll::kernels::ops::device
