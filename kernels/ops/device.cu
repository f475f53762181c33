#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "kernels/device_executor.cuh"
#include "kernels/ops/bodies/axis_sums.h"
#include "kernels/ops/bodies/crop.h"
#include "kernels/ops/bodies/ctc.h"
#include "kernels/ops/bodies/grid_sample.h"
#include "kernels/ops/bodies/losses.h"
#include "kernels/ops/bodies/resample.h"
#include "kernels/ops/bodies/scatter.h"
#include "kernels/ops/bodies/selection.h"
#include "kernels/ops/bodies/taps.h"
#include "kernels/ops/bodies/writes.h"
#include "kernels/ops/device.h"

namespace detcoll::kernels::ops::device {

Status scatterAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                  const Shape& indexShape, const void* src, const Shape& srcShape, void* stream) {
  DeviceExecutor e(stream);
  return bodies::scatterAdd(e, self, selfShape, type, dim, index, indexShape, src, srcShape);
}

Status indexAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                int64_t indexCount, const void* source, const Shape& sourceShape, double alpha,
                void* stream) {
  DeviceExecutor e(stream);
  return bodies::indexAdd(e, self, selfShape, type, dim, index, indexCount, source, sourceShape,
                          alpha);
}

Status unsortedSegmentReduce(void* out, int64_t segments, DataType type, const void* data,
                             const Shape& dataShape, const int64_t* segmentIds, int idDims,
                             bool mean, void* stream) {
  DeviceExecutor e(stream);
  return bodies::unsortedSegmentReduce(e, out, segments, type, data, dataShape, segmentIds, idDims,
                                       mean);
}

Status embeddingBackward(void* gradWeight, int64_t numWeights, DataType type,
                         const void* gradOutput, int64_t count, int64_t dim, const int64_t* indices,
                         int64_t paddingIdx, bool scaleGradByFreq, void* stream) {
  DeviceExecutor e(stream);
  return bodies::embeddingBackward(e, gradWeight, numWeights, type, gradOutput, count, dim, indices,
                                   paddingIdx, scaleGradByFreq);
}

Status embeddingBagBackward(void* gradWeight, int64_t numWeights, DataType type,
                            const void* gradOutput, int64_t bags, int64_t dim,
                            const int64_t* indices, int64_t count, const int64_t* offsets,
                            bool mean, const void* perSampleWeights, int64_t paddingIdx,
                            void* stream) {
  DeviceExecutor e(stream);
  return bodies::embeddingBagBackward(e, gradWeight, numWeights, type, gradOutput, bags, dim,
                                      indices, count, offsets, mean, perSampleWeights, paddingIdx);
}

Status bincount(void* out, int64_t* outLength, DataType type, const int64_t* input, int64_t count,
                const void* weights, int64_t minlength, void* stream) {
  DeviceExecutor e(stream);
  return bodies::bincount(e, out, outLength, type, input, count, weights, minlength);
}

Status sparseDenseMatmul(void* out, int64_t outRows, DataType type, const int64_t* rows,
                         const int64_t* cols, const void* values, int64_t nnz, const void* dense,
                         int64_t denseRows, int64_t columns, void* stream) {
  DeviceExecutor e(stream);
  return bodies::sparseDenseMatmul(e, out, outRows, type, rows, cols, values, nnz, dense, denseRows,
                                   columns);
}

Status weightedScatter(void* out, int64_t planes, int64_t outInner, DataType type,
                       const int64_t* destination, int64_t n, const void* values,
                       int64_t valuesInner, const int64_t* rows, const void* weights,
                       void* stream) {
  DeviceExecutor e(stream);
  return bodies::weightedScatter(e, out, planes, outInner, type, destination, n, values,
                                 valuesInner, rows, weights);
}

Status padBackward(void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                   const Shape& inputSpatial, const std::vector<int64_t>& padding, bool reflect,
                   void* stream) {
  DeviceExecutor e(stream);
  return bodies::padBackward(e, gradInput, gradOutput, type, planes, inputSpatial, padding,
                             reflect);
}

Status upsampleLinearBackward(void* gradInput, const void* gradOutput, DataType type,
                              int64_t planes, const Shape& inputSpatial, const Shape& outputSpatial,
                              bool alignCorners, const std::vector<double>& scales, void* stream) {
  DeviceExecutor e(stream);
  return bodies::upsampleLinearBackward(e, gradInput, gradOutput, type, planes, inputSpatial,
                                        outputSpatial, alignCorners, scales);
}

Status avgPoolBackward(void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                       const Shape& inputSpatial, const AvgPool& pool, void* stream) {
  DeviceExecutor e(stream);
  return bodies::avgPoolBackward(e, gradInput, gradOutput, type, planes, inputSpatial, pool);
}

Status adaptiveAvgPoolBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, void* stream) {
  DeviceExecutor e(stream);
  return bodies::adaptiveAvgPoolBackward(e, gradInput, gradOutput, type, planes, inputSpatial,
                                         outputSpatial);
}

Status maxPoolBackward(void* gradInput, const void* gradOutput, const int64_t* indices,
                       DataType type, int64_t planes, int64_t inner, int64_t outputs,
                       void* stream) {
  DeviceExecutor e(stream);
  return bodies::maxPoolBackward(e, gradInput, gradOutput, indices, type, planes, inner, outputs);
}

Status upsampleBicubicBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, bool alignCorners,
                               const std::vector<double>& scales, void* stream) {
  DeviceExecutor e(stream);
  return bodies::upsampleBicubicBackward(e, gradInput, gradOutput, type, planes, inputSpatial,
                                         outputSpatial, alignCorners, scales);
}

Status writeLast(void* out, int64_t rows, int64_t width, DataType type, const int64_t* destination,
                 int64_t n, const void* values, void* stream) {
  DeviceExecutor e(stream);
  return bodies::writeLast(e, out, rows, width, type, destination, n, values);
}

Status maxUnpool(void* out, const void* input, const int64_t* indices, DataType type,
                 int64_t planes, int64_t inputs, int64_t outputs, void* stream) {
  DeviceExecutor e(stream);
  return bodies::maxUnpool(e, out, input, indices, type, planes, inputs, outputs);
}

Status histc(void* out, DataType type, const void* input, int64_t n, int64_t bins, double min,
             double max, void* stream) {
  DeviceExecutor e(stream);
  return bodies::histc(e, out, type, input, n, bins, min, max);
}

Status embeddingBagMaxBackward(void* gradWeight, int64_t numWeights, DataType type,
                               const void* gradOutput, int64_t bags, int64_t dim,
                               const int64_t* maximumIndices, const int64_t* bagSize,
                               int64_t paddingIdx, void* stream) {
  DeviceExecutor e(stream);
  return bodies::embeddingBagMaxBackward(e, gradWeight, numWeights, type, gradOutput, bags, dim,
                                         maximumIndices, bagSize, paddingIdx);
}

Status gridSamplerBackward(void* gradInput, void* gradGrid, const void* gradOutput,
                           const void* input, const void* gridValues, DataType type,
                           const GridSample& s, void* stream) {
  DeviceExecutor e(stream);
  return bodies::gridSamplerBackward(e, gradInput, gradGrid, gradOutput, input, gridValues, type,
                                     s);
}

Status ctcLossBackward(void* gradLogProbs, const void* grad, const void* logProbs,
                       const int64_t* targets, const int64_t* inputLengths,
                       const int64_t* targetLengths, const void* nll, const void* logAlpha,
                       DataType type, const Ctc& ctc, void* stream) {
  DeviceExecutor e(stream);
  return bodies::ctcLossBackward(e, gradLogProbs, grad, logProbs, targets, inputLengths,
                                 targetLengths, nll, logAlpha, type, ctc);
}

Status nllLoss(void* output, void* totalWeight, const void* input, const int64_t* target,
               const void* weight, DataType type, const NllLoss& l, void* stream) {
  DeviceExecutor e(stream);
  return bodies::nllLoss(e, output, totalWeight, input, target, weight, type, l);
}

Status select(void* values, int64_t* indices, const void* input, DataType type, const Selection& s,
              void* stream) {
  DeviceExecutor e(stream);
  return bodies::select(e, values, indices, input, type, s);
}

Status cropAndResize(void* out, const void* image, const void* boxes, const int64_t* boxIndices,
                     DataType type, const Crop& c, void* stream) {
  DeviceExecutor e(stream);
  return bodies::cropAndResize(e, out, image, boxes, boxIndices, type, c);
}

Status cropAndResizeBackward(void* gradImage, void* gradBoxes, const void* grads, const void* image,
                             const void* boxes, const int64_t* boxIndices, DataType type,
                             const Crop& c, void* stream) {
  DeviceExecutor e(stream);
  return bodies::cropAndResizeBackward(e, gradImage, gradBoxes, grads, image, boxes, boxIndices,
                                       type, c);
}

Status upsampleNearestBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, const std::vector<double>& scales,
                               void* stream) {
  DeviceExecutor e(stream);
  return bodies::upsampleNearestBackward(e, gradInput, gradOutput, type, planes, inputSpatial,
                                         outputSpatial, scales);
}

Status sumOverAxes(const void* in, const Shape& shape, DataType type, std::vector<int> axes,
                   void* out, void* stream) {
  DeviceExecutor e(stream);
  return bodies::sumOverAxes(e, in, shape, type, std::move(axes), out);
}

Status biasAddGrad(const void* grad, const Shape& shape, DataType type, bool channelsFirst,
                   void* out, void* stream) {
  DeviceExecutor e(stream);
  return bodies::biasAddGrad(e, grad, shape, type, channelsFirst, out);
}

Status bilinear2dBackward(void* gradInput, const void* gradOutput, DataType type,
                          const Bilinear& shape, void* stream) {
  DeviceExecutor e(stream);
  return bodies::bilinear2dBackward(e, gradInput, gradOutput, type, shape);
}

Status maxPool2d(void* out, int64_t* indices, const void* in, DataType type, const Pool2d& pool,
                 void* stream) {
  DeviceExecutor e(stream);
  return bodies::maxPool2d(e, out, indices, in, type, pool);
}

Status maxPool2dBackward(void* gradInput, const void* gradOutput, const int64_t* indices,
                         DataType type, const Pool2d& pool, void* stream) {
  DeviceExecutor e(stream);
  return bodies::maxPool2dBackward(e, gradInput, gradOutput, indices, type, pool);
}

}  // namespace detcoll::kernels::ops::device
