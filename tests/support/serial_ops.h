#pragma once

// The serial run of the CUDA ops: the data-parallel formulation of kernels/ops/bodies/ (sort,
// segment offsets, per-destination reduction, tree levels, gathers) run on the host by the serial
// executor (serial_executor.h), one body call per grid index, with a stable sort in place of the
// device radix sort. It exists to test the GPU algorithm where there is no GPU: its results must
// equal the CPU reference's bit for bit, and its errors must read the same. Host memory; the
// signatures of scatter.h, axis_sums.h and resample.h without the thread count.

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/ops/crop.h"
#include "kernels/ops/ctc.h"
#include "kernels/ops/grid_sample.h"
#include "kernels/ops/losses.h"
#include "kernels/ops/resample.h"
#include "kernels/ops/scatter.h"
#include "kernels/ops/selection.h"
#include "kernels/ops/taps.h"

namespace detcoll::testing::serial {

using kernels::ops::AvgPool;
using kernels::ops::Bilinear;
using kernels::ops::Pool2d;
using kernels::ops::Shape;

Status scatterAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                  const Shape& indexShape, const void* src, const Shape& srcShape);
Status indexAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                int64_t indexCount, const void* source, const Shape& sourceShape, double alpha);
Status unsortedSegmentReduce(void* out, int64_t segments, DataType type, const void* data,
                             const Shape& dataShape, const int64_t* segmentIds, int idDims,
                             bool mean);
Status embeddingBackward(void* gradWeight, int64_t numWeights, DataType type,
                         const void* gradOutput, int64_t count, int64_t dim, const int64_t* indices,
                         int64_t paddingIdx, bool scaleGradByFreq);
Status embeddingBagBackward(void* gradWeight, int64_t numWeights, DataType type,
                            const void* gradOutput, int64_t bags, int64_t dim,
                            const int64_t* indices, int64_t count, const int64_t* offsets,
                            bool mean, const void* perSampleWeights, int64_t paddingIdx);
Status bincount(void* out, int64_t* outLength, DataType type, const int64_t* input, int64_t count,
                const void* weights, int64_t minlength);
Status padBackward(void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                   const Shape& inputSpatial, const std::vector<int64_t>& padding, bool reflect);
Status upsampleLinearBackward(void* gradInput, const void* gradOutput, DataType type,
                              int64_t planes, const Shape& inputSpatial, const Shape& outputSpatial,
                              bool alignCorners, const std::vector<double>& scales);
Status avgPoolBackward(void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                       const Shape& inputSpatial, const AvgPool& pool);
Status adaptiveAvgPoolBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial);
Status maxPoolBackward(void* gradInput, const void* gradOutput, const int64_t* indices,
                       DataType type, int64_t planes, int64_t inner, int64_t outputs);
Status sparseDenseMatmul(void* out, int64_t outRows, DataType type, const int64_t* rows,
                         const int64_t* cols, const void* values, int64_t nnz, const void* dense,
                         int64_t denseRows, int64_t columns);
Status weightedScatter(void* out, int64_t planes, int64_t outInner, DataType type,
                       const int64_t* destination, int64_t n, const void* values,
                       int64_t valuesInner, const int64_t* rows, const void* weights);
Status upsampleBicubicBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, bool alignCorners,
                               const std::vector<double>& scales);
Status writeLast(void* out, int64_t rows, int64_t width, DataType type, const int64_t* destination,
                 int64_t n, const void* values);
Status maxUnpool(void* out, const void* input, const int64_t* indices, DataType type,
                 int64_t planes, int64_t inputs, int64_t outputs);
Status histc(void* out, DataType type, const void* input, int64_t n, int64_t bins, double min,
             double max);
Status embeddingBagMaxBackward(void* gradWeight, int64_t numWeights, DataType type,
                               const void* gradOutput, int64_t bags, int64_t dim,
                               const int64_t* maximumIndices, const int64_t* bagSize,
                               int64_t paddingIdx);
Status gridSamplerBackward(void* gradInput, void* gradGrid, const void* gradOutput,
                           const void* input, const void* gridValues, DataType type,
                           const kernels::ops::GridSample& s);
Status ctcLossBackward(void* gradLogProbs, const void* grad, const void* logProbs,
                       const int64_t* targets, const int64_t* inputLengths,
                       const int64_t* targetLengths, const void* nll, const void* logAlpha,
                       DataType type, const kernels::ops::Ctc& ctc);
Status nllLoss(void* output, void* totalWeight, const void* input, const int64_t* target,
               const void* weight, DataType type, const kernels::ops::NllLoss& l);
Status select(void* values, int64_t* indices, const void* input, DataType type,
              const kernels::ops::Selection& s);
Status cropAndResize(void* out, const void* image, const void* boxes, const int64_t* boxIndices,
                     DataType type, const kernels::ops::Crop& c);
Status cropAndResizeBackward(void* gradImage, void* gradBoxes, const void* grads, const void* image,
                             const void* boxes, const int64_t* boxIndices, DataType type,
                             const kernels::ops::Crop& c);
Status upsampleNearestBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, const std::vector<double>& scales);
Status sumOverAxes(const void* in, const Shape& shape, DataType type, std::vector<int> axes,
                   void* out);
Status biasAddGrad(const void* grad, const Shape& shape, DataType type, bool channelsFirst,
                   void* out);
Status bilinear2dBackward(void* gradInput, const void* gradOutput, DataType type,
                          const Bilinear& shape);
Status maxPool2d(void* out, int64_t* indices, const void* in, DataType type, const Pool2d& pool);
Status maxPool2dBackward(void* gradInput, const void* gradOutput, const int64_t* indices,
                         DataType type, const Pool2d& pool);

}  // namespace detcoll::testing::serial
