// The ops added for torch's patched families on the GPU (kernels/ops/device.h) against the CPU
// reference, bit for bit: max_unpool, embedding_bag's max gradient, sparse x dense, histc, bicubic
// upsampling's, grid_sample's and ctc_loss's backward (ctc_loss: run to run, and the CPU's up to
// the device's exp and log), nll_loss, kthvalue and median, crop_and_resize, every dtype, random
// wide-range values with heavy duplication. Skips, saying so, when no GPU is present.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"
#include "kernels/ops/crop.h"
#include "kernels/ops/ctc.h"
#include "kernels/ops/cubic.h"
#include "kernels/ops/device.h"
#include "kernels/ops/grid_sample.h"
#include "kernels/ops/losses.h"
#include "kernels/ops/scatter.h"
#include "kernels/ops/selection.h"
#include "kernels/ops/writes.h"
#include "tests/gpu/gpu_test.h"
#include "tests/support/op_data.h"
#include "tests/support/reference.h"

namespace detcoll::kernels::ops {
namespace {

using testing::Device;
using testing::opIndices;
using testing::opValues;
using Bytes = std::vector<uint8_t>;

void expectSame(const Bytes& actual, const Bytes& expected, DataType type,
                const std::string& what) {
  EXPECT_EQ(testing::bitsDiffer(actual, expected, type, "the GPU result", "the CPU reference"), "")
      << what;
}

TEST(OpsGpu, WritesEmbeddingBagMaxHistcAndBicubicBackward) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  const int64_t planes = 24, inputs = 14 * 14, outputs = 28 * 28;
  const std::vector<int64_t> indices = opIndices(planes * inputs, 0, outputs / 3, 91);
  for (DataType t : testing::kAllTypes) {
    const Bytes in = opValues(t, planes * inputs, 92);
    Bytes cpu(planes * outputs * dataTypeSize(t));
    ASSERT_TRUE(
        maxUnpool(cpu.data(), in.data(), indices.data(), t, planes, inputs, outputs).isOk());
    Device dIn(in), dIndices(indices), dOut(Bytes(cpu.size(), 0xab));
    ASSERT_TRUE(device::maxUnpool(dOut.get(), dIn.get(), dIndices.ints(), t, planes, inputs,
                                  outputs, nullptr)
                    .isOk());
    expectSame(dOut.bytes(), cpu, t, "max_unpool");
  }
  const std::vector<int64_t> rows = opIndices(4000 * 64, -1, 50, 95);
  const std::vector<int64_t> sizes = opIndices(4000, 0, 3, 96);
  for (DataType t : testing::kFloatTypes) {
    const Bytes grad = opValues(t, 4000 * 64, 97);
    Bytes cpu(50 * 64 * dataTypeSize(t));
    ASSERT_TRUE(embeddingBagMaxBackward(cpu.data(), 50, t, grad.data(), 4000, 64, rows.data(),
                                        sizes.data(), 7, 0)
                    .isOk());
    Device dGrad(grad), dRows(rows), dSizes(sizes), dOut(Bytes(cpu.size(), 0xab));
    ASSERT_TRUE(device::embeddingBagMaxBackward(dOut.get(), 50, t, dGrad.get(), 4000, 64,
                                                dRows.ints(), dSizes.ints(), 7, nullptr)
                    .isOk());
    expectSame(dOut.bytes(), cpu, t, "embedding_bag max backward");
  }
  const std::vector<int64_t> spRows = opIndices(300000, 0, 900, 102);
  const std::vector<int64_t> spCols = opIndices(300000, 0, 700, 103);
  for (DataType t : testing::kFloatTypes) {
    const Bytes values = opValues(t, 300000, 104), dense = opValues(t, 700 * 48, 105);
    Bytes cpu(900 * 48 * dataTypeSize(t));
    ASSERT_TRUE(sparseDenseMatmul(cpu.data(), 900, t, spRows.data(), spCols.data(), values.data(),
                                  300000, dense.data(), 700, 48, 0)
                    .isOk());
    Device dRows(spRows), dCols(spCols), dValues(values), dDense(dense),
        dOut(Bytes(cpu.size(), 0xab));
    ASSERT_TRUE(device::sparseDenseMatmul(dOut.get(), 900, t, dRows.ints(), dCols.ints(),
                                          dValues.get(), 300000, dDense.get(), 700, 48, nullptr)
                    .isOk());
    expectSame(dOut.bytes(), cpu, t, "sparse x dense");
  }
  for (DataType t : testing::kFloatTypes) {
    const Bytes x = opValues(t, 200000, 93);
    for (auto [lo, hi] : {std::pair<double, double>{0, 0}, {-1e3, 2.5e3}}) {
      Bytes cpu(777 * dataTypeSize(t));
      ASSERT_TRUE(histc(cpu.data(), t, x.data(), 200000, 777, lo, hi).isOk());
      Device dX(x), dOut(Bytes(cpu.size()));
      ASSERT_TRUE(device::histc(dOut.get(), t, dX.get(), 200000, 777, lo, hi, nullptr).isOk());
      expectSame(dOut.bytes(), cpu, t, "histc");
    }
    const Shape small{14, 14}, large{31, 45};
    const Bytes up = opValues(t, planes * 31 * 45, 94);
    Bytes cpu(planes * 14 * 14 * dataTypeSize(t));
    ASSERT_TRUE(
        upsampleBicubicBackward(cpu.data(), up.data(), t, planes, small, large, false, {}, 0)
            .isOk());
    Device dUp(up), dOut(Bytes(cpu.size()));
    ASSERT_TRUE(device::upsampleBicubicBackward(dOut.get(), dUp.get(), t, planes, small, large,
                                                false, {}, nullptr)
                    .isOk());
    expectSame(dOut.bytes(), cpu, t, "bicubic backward");
  }
}

TEST(OpsGpu, GridSampleBackwardEveryModeAndPadding) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  std::mt19937_64 gen(121);
  std::uniform_real_distribution<float> u(-1.6f, 1.6f);
  for (int spatial : {2, 3}) {
    for (int mode = 0; mode < 3; ++mode) {
      if (mode == 2 && spatial == 3) continue;
      for (int padding = 0; padding < 3; ++padding) {
        GridSample s;
        s.spatial = spatial;
        s.batch = 4;
        s.channels = 16;
        s.sizes[0] = spatial == 3 ? 8 : 24;
        s.sizes[1] = spatial == 3 ? 12 : 31;
        s.sizes[2] = spatial == 3 ? 10 : 1;
        s.positions = spatial == 3 ? 9 * 11 * 13 : 40 * 37;
        s.mode = static_cast<GridMode>(mode);
        s.padding = static_cast<GridPadding>(padding);
        s.alignCorners = padding == 1;
        for (DataType t : testing::kFloatTypes) {
          const int64_t points = s.batch * s.positions * spatial;
          std::vector<double> coordinates(points);
          for (double& v : coordinates) v = u(gen);
          const Bytes grid = testing::fromDoubles(coordinates, t);
          const Bytes input = opValues(t, s.batch * s.channels * s.inner(), 122);
          const Bytes up = opValues(t, s.batch * s.channels * s.positions, 123);
          Bytes cpuInput(input.size()), cpuGrid(grid.size());
          ASSERT_TRUE(gridSamplerBackward(cpuInput.data(), cpuGrid.data(), up.data(), input.data(),
                                          grid.data(), t, s, 0)
                          .isOk());
          Device dInput(input), dGrid(grid), dUp(up), dGradInput(Bytes(input.size(), 0xab)),
              dGradGrid(Bytes(grid.size(), 0xab));
          ASSERT_TRUE(device::gridSamplerBackward(dGradInput.get(), dGradGrid.get(), dUp.get(),
                                                  dInput.get(), dGrid.get(), t, s, nullptr)
                          .isOk());
          const std::string what = std::to_string(spatial) + "-D mode " + std::to_string(mode) +
                                   " padding " + std::to_string(padding);
          expectSame(dGradInput.bytes(), cpuInput, t, what + ": the input's gradient");
          expectSame(dGradGrid.bytes(), cpuGrid, t, what + ": the grid's gradient");
        }
      }
    }
  }
}

TEST(OpsGpu, CtcLossBackwardRepeatsAndIsTheCpusUpToExpAndLog) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  Ctc c;
  c.steps = 120;
  c.batch = 8;
  c.classes = 40;
  c.blank = 0;
  c.targetStride = 30;
  c.alphaWidth = 61;
  std::vector<int64_t> inputs(c.batch), lengths(c.batch);
  for (int64_t b = 0; b < c.batch; ++b) {
    inputs[b] = c.steps - 9 * b;
    lengths[b] = 30 - 3 * b;
  }
  const std::vector<int64_t> targets = opIndices(c.batch * c.targetStride, 1, 6, 131);
  std::mt19937_64 gen(132);
  std::normal_distribution<double> normal(-3.0, 1.0);
  std::vector<double> lp(c.steps * c.batch * c.classes), alpha(c.batch * c.steps * c.alphaWidth);
  for (double& v : lp) v = normal(gen);
  for (double& v : alpha) v = normal(gen) * 20;
  std::vector<double> nll(c.batch, 80.0), up(c.batch, 0.75);
  for (DataType t : testing::kFloatTypes) {
    const Bytes lpB = testing::fromDoubles(lp, t), alphaB = testing::fromDoubles(alpha, t),
                nllB = testing::fromDoubles(nll, t), upB = testing::fromDoubles(up, t);
    Bytes cpu(lpB.size());
    ASSERT_TRUE(ctcLossBackward(cpu.data(), upB.data(), lpB.data(), targets.data(), inputs.data(),
                                lengths.data(), nllB.data(), alphaB.data(), t, c, 0)
                    .isOk());
    Device dLp(lpB), dAlpha(alphaB), dNll(nllB), dUp(upB), dTargets(targets);
    Bytes runs[2];
    for (Bytes& run : runs) {
      Device dOut(Bytes(cpu.size(), 0xab));
      ASSERT_TRUE(device::ctcLossBackward(dOut.get(), dUp.get(), dLp.get(), dTargets.ints(),
                                          inputs.data(), lengths.data(), dNll.get(), dAlpha.get(),
                                          t, c, nullptr)
                      .isOk());
      run = dOut.bytes();
    }
    EXPECT_EQ(runs[0], runs[1]) << dataTypeName(t) << ": two runs on the device";
    const double tolerance = t == DataType::kFloat64   ? 1e-12
                             : t == DataType::kFloat32 ? 1e-6
                                                       : 1e-2;
    for (size_t i = 0; i < lp.size(); ++i) {
      const double a = testing::elementAsDouble(runs[0].data(), i, t),
                   b = testing::elementAsDouble(cpu.data(), i, t);
      ASSERT_LE(std::abs(a - b), tolerance * (1 + std::abs(b))) << dataTypeName(t) << " at " << i;
    }
  }
}

TEST(OpsGpu, NllLossEveryReduction) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  NllLoss l;
  l.outer = 64;
  l.classes = 21;
  l.inner = 96 * 96;
  l.ignoreIndex = 7;
  const int64_t samples = l.outer * l.inner;
  const std::vector<int64_t> target = opIndices(samples, 0, l.classes, 151);
  for (DataType t : testing::kFloatTypes) {
    const Bytes input = opValues(t, samples * l.classes, 152), weight = opValues(t, l.classes, 153);
    Device dInput(input), dTarget(target), dWeight(weight);
    for (int reduction : {0, 1, 2}) {
      l.reduction = reduction;
      const size_t outputs = reduction == 0 ? samples : 1;
      Bytes cpu(outputs * dataTypeSize(t)), cpuTotal(dataTypeSize(t));
      ASSERT_TRUE(
          nllLoss(cpu.data(), cpuTotal.data(), input.data(), target.data(), weight.data(), t, l, 0)
              .isOk());
      Device dOut(Bytes(cpu.size(), 0xab)), dTotal(Bytes(cpuTotal.size(), 0xab));
      ASSERT_TRUE(device::nllLoss(dOut.get(), dTotal.get(), dInput.get(), dTarget.ints(),
                                  dWeight.get(), t, l, nullptr)
                      .isOk());
      expectSame(dOut.bytes(), cpu, t, "nll_loss reduction " + std::to_string(reduction));
      expectSame(dTotal.bytes(), cpuTotal, t, "nll_loss total weight");
    }
  }
}

TEST(OpsGpu, KthvalueAndMedian) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  Selection s;
  s.outer = 33;
  s.length = 1000;
  s.inner = 7;
  for (DataType t : testing::kAllTypes) {
    // Few distinct values: long runs of ties.
    std::vector<int64_t> draws = opIndices(s.outer * s.length * s.inner, -20, 20, 171);
    std::vector<double> x(draws.begin(), draws.end());
    for (double& v : x) v = v == 19 && isFloatingPoint(t) ? NAN : v / 4;
    if (!isFloatingPoint(t)) {
      for (double& v : x) v = std::floor(v);
    }
    const Bytes input = testing::fromDoubles(x, t);
    Device dInput(input);
    for (bool median : {false, true}) {
      Selection q = s;
      q.median = median;
      q.k = median ? (s.length + 1) / 2 : 137;
      const int64_t slices = s.outer * s.inner;
      Bytes cpu(slices * dataTypeSize(t));
      std::vector<int64_t> cpuIdx(slices);
      ASSERT_TRUE(select(cpu.data(), cpuIdx.data(), input.data(), t, q, 0).isOk());
      Device dValues(Bytes(cpu.size(), 0xab)), dIdx(std::vector<int64_t>(slices, -1));
      ASSERT_TRUE(device::select(dValues.get(), dIdx.ints(), dInput.get(), t, q, nullptr).isOk());
      expectSame(dValues.bytes(), cpu, t, median ? "median" : "kthvalue");
      EXPECT_EQ(dIdx.int64s(), cpuIdx) << dataTypeName(t) << (median ? " median" : " kthvalue");
    }
  }
}

TEST(OpsGpu, CropAndResizeAndItsGradients) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  Crop c;
  c.batch = 4;
  c.height = 64;
  c.width = 80;
  c.channels = 32;
  c.boxes = 300;
  c.cropHeight = 7;
  c.cropWidth = 9;
  c.extrapolation = 0.25;
  std::mt19937_64 gen(191);
  std::uniform_real_distribution<double> u(-0.2, 1.2);  // some boxes past the image
  std::vector<double> boxList(4 * c.boxes);
  for (double& v : boxList) v = u(gen);
  const std::vector<int64_t> index = opIndices(c.boxes, 0, c.batch, 192);
  for (bool nearest : {false, true}) {
    c.nearest = nearest;
    for (DataType t : testing::kFloatTypes) {
      const Bytes image = opValues(t, c.batch * c.height * c.width * c.channels, 193);
      const Bytes boxes = testing::fromDoubles(boxList, t);
      const Bytes grads = opValues(t, c.boxes * 63 * c.channels, 194);
      Bytes out(grads.size()), gi(image.size()), gb(boxes.size());
      ASSERT_TRUE(
          cropAndResize(out.data(), image.data(), boxes.data(), index.data(), t, c, 0).isOk());
      ASSERT_TRUE(cropAndResizeBackward(gi.data(), gb.data(), grads.data(), image.data(),
                                        boxes.data(), index.data(), t, c, 0)
                      .isOk());
      Device dImage(image), dBoxes(boxes), dIndex(index), dGrads(grads),
          dOut(Bytes(out.size(), 0xab)), dGi(Bytes(gi.size(), 0xab)), dGb(Bytes(gb.size(), 0xab));
      ASSERT_TRUE(device::cropAndResize(dOut.get(), dImage.get(), dBoxes.get(), dIndex.ints(), t, c,
                                        nullptr)
                      .isOk());
      ASSERT_TRUE(device::cropAndResizeBackward(dGi.get(), dGb.get(), dGrads.get(), dImage.get(),
                                                dBoxes.get(), dIndex.ints(), t, c, nullptr)
                      .isOk());
      const std::string what = nearest ? "crop_and_resize nearest" : "crop_and_resize bilinear";
      expectSame(dOut.bytes(), out, t, what);
      expectSame(dGi.bytes(), gi, t, what + ": the image's gradient");
      expectSame(dGb.bytes(), gb, t, what + ": the boxes' gradient");
    }
  }
}

}  // namespace
}  // namespace detcoll::kernels::ops
