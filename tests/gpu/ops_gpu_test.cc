// The deterministic ops on the GPU (kernels/ops/device.h) against the CPU reference, bit for bit:
// every op and dtype, random wide-range values, heavy duplication (few destinations, many
// sources), run twice for run-to-run equality, and the CPU reference's error, word for word, for
// a bad index with the output untouched. Skips, saying so, when no GPU is present.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops/axis_sums.h"
#include "kernels/ops/cubic.h"
#include "kernels/ops/device.h"
#include "kernels/ops/resample.h"
#include "kernels/ops/scatter.h"
#include "kernels/ops/writes.h"
#include "tests/gpu/gpu_test.h"
#include "tests/support/op_data.h"
#include "tests/support/reference.h"

namespace detcoll::kernels::ops {
namespace {

using testing::opIndices;
using testing::opValues;
using Bytes = std::vector<uint8_t>;
using testing::Device;

void expectSame(const Bytes& actual, const Bytes& expected, DataType type,
                const std::string& what) {
  EXPECT_EQ(testing::bitsDiffer(actual, expected, type, "the GPU result", "the CPU reference"), "")
      << what;
}

TEST(OpsGpu, ScatterAddOneDimensionalHeavyDuplication) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  for (DataType t : testing::kAllTypes) {
    for (int64_t m : {int64_t{1}, int64_t{97}, int64_t{100003}}) {
      const int64_t n = 1 << 20;
      const std::vector<int64_t> index = opIndices(n, 0, m, 1 + m);
      const Bytes src = opValues(t, n, 2), base = opValues(t, m, 3);
      Bytes cpu = base;
      ASSERT_TRUE(scatterAdd(cpu.data(), {m}, t, 0, index.data(), {n}, src.data(), {n}, 0).isOk());
      for (int run = 0; run < 2; ++run) {
        Device self(base), dIndex(index), dSrc(src);
        ASSERT_TRUE(
            device::scatterAdd(self.get(), {m}, t, 0, dIndex.ints(), {n}, dSrc.get(), {n}, nullptr)
                .isOk());
        expectSame(self.bytes(), cpu, t, "scatter_add m=" + std::to_string(m));
      }
    }
  }
}

TEST(OpsGpu, ScatterAddEveryDim) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  const Shape self{16, 9, 33}, src{40, 12, 50};
  for (DataType t : testing::kAllTypes) {
    for (int dim : {0, 1, 2}) {
      Shape index{16, 9, 33};
      index[dim] = src[dim];
      const int64_t n = index[0] * index[1] * index[2];
      const std::vector<int64_t> where = opIndices(n, 0, self[dim], 4 + dim);
      const Bytes s = opValues(t, 40 * 12 * 50, 5), base = opValues(t, 16 * 9 * 33, 6);
      Bytes cpu = base;
      ASSERT_TRUE(
          scatterAdd(cpu.data(), self, t, dim, where.data(), index, s.data(), src, 0).isOk());
      Device out(base), dWhere(where), dSrc(s);
      ASSERT_TRUE(device::scatterAdd(out.get(), self, t, dim, dWhere.ints(), index, dSrc.get(), src,
                                     nullptr)
                      .isOk());
      expectSame(out.bytes(), cpu, t, "scatter_add dim " + std::to_string(dim));
    }
  }
}

TEST(OpsGpu, IndexAddSegmentsEmbeddingsBincount) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  for (DataType t : testing::kAllTypes) {
    {  // index_add along a middle dim, alpha != 1
      const Shape self{4, 50, 24};
      const int64_t n = 3000;
      const std::vector<int64_t> index = opIndices(n, 0, 50, 7);
      const Bytes source = opValues(t, 4 * n * 24, 8), base = opValues(t, 4 * 50 * 24, 9);
      Bytes cpu = base;
      ASSERT_TRUE(
          indexAdd(cpu.data(), self, t, 1, index.data(), n, source.data(), {4, n, 24}, -0.75, 0)
              .isOk());
      Device out(base), dIndex(index), dSource(source);
      ASSERT_TRUE(device::indexAdd(out.get(), self, t, 1, dIndex.ints(), n, dSource.get(),
                                   {4, n, 24}, -0.75, nullptr)
                      .isOk());
      expectSame(out.bytes(), cpu, t, "index_add");
    }
    for (bool mean : {false, true}) {  // unsorted_segment_sum / _mean with dropped ids
      const int64_t segments = 257, rows = 20000, width = 16;
      std::vector<int64_t> ids = opIndices(rows, -5, segments, 10);
      const Bytes data = opValues(t, rows * width, 11);
      Bytes cpu(segments * width * dataTypeSize(t));
      ASSERT_TRUE(unsortedSegmentReduce(cpu.data(), segments, t, data.data(), {rows, width},
                                        ids.data(), 1, mean, 0)
                      .isOk());
      Device out(Bytes(cpu.size())), dIds(ids), dData(data);
      ASSERT_TRUE(device::unsortedSegmentReduce(out.get(), segments, t, dData.get(), {rows, width},
                                                dIds.ints(), 1, mean, nullptr)
                      .isOk());
      expectSame(out.bytes(), cpu, t, mean ? "segment mean" : "segment sum");
    }
    {  // weighted bincount
      const std::vector<int64_t> input = opIndices(1 << 18, 0, 300, 12);
      const Bytes weights = opValues(t, 1 << 18, 13);
      int64_t length = 0, deviceLength = 0;
      Bytes cpu(400 * dataTypeSize(t));
      ASSERT_TRUE(
          bincount(cpu.data(), &length, t, input.data(), 1 << 18, weights.data(), 400, 0).isOk());
      Device out(Bytes(cpu.size())), dInput(input), dWeights(weights);
      ASSERT_TRUE(device::bincount(out.get(), &deviceLength, t, dInput.ints(), 1 << 18,
                                   dWeights.get(), 400, nullptr)
                      .isOk());
      EXPECT_EQ(deviceLength, length);
      expectSame(out.bytes(), cpu, t, "bincount");
    }
  }
  for (DataType t : testing::kFloatTypes) {
    for (bool byFrequency : {false, true}) {  // embedding backward, padding row 3
      const int64_t rows = 1000, count = 65536, dim = 64;
      const std::vector<int64_t> idx = opIndices(count, 0, rows, 14);
      const Bytes grad = opValues(t, count * dim, 15);
      Bytes cpu(rows * dim * dataTypeSize(t));
      ASSERT_TRUE(embeddingBackward(cpu.data(), rows, t, grad.data(), count, dim, idx.data(), 3,
                                    byFrequency, 0)
                      .isOk());
      Device out(Bytes(cpu.size())), dIdx(idx), dGrad(grad);
      ASSERT_TRUE(device::embeddingBackward(out.get(), rows, t, dGrad.get(), count, dim,
                                            dIdx.ints(), 3, byFrequency, nullptr)
                      .isOk());
      expectSame(out.bytes(), cpu, t, "embedding backward");
    }
    for (int mode = 0; mode < 3; ++mode) {  // embedding_bag sum, mean, per-sample weights
      const int64_t rows = 500, count = 20000, dim = 32, bags = 700;
      const std::vector<int64_t> idx = opIndices(count, 0, rows, 16);
      std::vector<int64_t> offsets = opIndices(bags, 0, count + 1, 17);
      std::sort(offsets.begin(), offsets.end());
      offsets[0] = 0;
      const Bytes grad = opValues(t, bags * dim, 18), psw = opValues(t, count, 19);
      Bytes cpu(rows * dim * dataTypeSize(t));
      ASSERT_TRUE(embeddingBagBackward(cpu.data(), rows, t, grad.data(), bags, dim, idx.data(),
                                       count, offsets.data(), mode == 1,
                                       mode == 2 ? psw.data() : nullptr, 0, 0)
                      .isOk());
      Device out(Bytes(cpu.size())), dIdx(idx), dOffsets(offsets), dGrad(grad), dPsw(psw);
      ASSERT_TRUE(device::embeddingBagBackward(out.get(), rows, t, dGrad.get(), bags, dim,
                                               dIdx.ints(), count, dOffsets.ints(), mode == 1,
                                               mode == 2 ? dPsw.get() : nullptr, 0, nullptr)
                      .isOk());
      expectSame(out.bytes(), cpu, t, "embedding_bag mode " + std::to_string(mode));
    }
  }
}

TEST(OpsGpu, WeightedScatterPlanesRowsAndWeights) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  for (DataType t : testing::kFloatTypes) {
    // The backward of a 3x3 window over 64 planes of 56 x 56: 9 taps per output position.
    const int64_t planes = 64, outInner = 56 * 56, valuesInner = 28 * 28, n = 9 * valuesInner;
    const std::vector<int64_t> destination = opIndices(n, 0, outInner, 51),
                               rows = opIndices(n, 0, valuesInner, 52);
    const Bytes values = opValues(t, planes * valuesInner, 53);
    const Bytes weights =
        opValues(t == DataType::kFloat64 ? DataType::kFloat64 : DataType::kFloat32, n, 54);
    for (int variant = 0; variant < 2; ++variant) {
      const bool weighted = variant == 0;
      Bytes cpu(planes * outInner * dataTypeSize(t));
      ASSERT_TRUE(weightedScatter(cpu.data(), planes, outInner, t, destination.data(), n,
                                  values.data(), valuesInner, rows.data(),
                                  weighted ? weights.data() : nullptr, 0)
                      .isOk());
      Device out(Bytes(cpu.size())), dDestination(destination), dRows(rows), dValues(values),
          dWeights(weights);
      for (int run = 0; run < 2; ++run) {
        ASSERT_TRUE(device::weightedScatter(out.get(), planes, outInner, t, dDestination.ints(), n,
                                            dValues.get(), valuesInner, dRows.ints(),
                                            weighted ? dWeights.get() : nullptr, nullptr)
                        .isOk());
        expectSame(out.bytes(), cpu, t, "weighted_scatter run " + std::to_string(run));
      }
    }
  }
}

TEST(OpsGpu, NaNResultsHaveTheCpuBits) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  // inf + -inf: a NaN whose bits the processor picks; both formulations write the canonical one.
  const std::vector<float> values{INFINITY, -INFINITY, 1.0f, -INFINITY, INFINITY};
  const std::vector<int64_t> destination{0, 0, 1, 2, 2};
  Bytes cpu(3 * 4);
  ASSERT_TRUE(weightedScatter(cpu.data(), 1, 3, DataType::kFloat32, destination.data(), 5,
                              values.data(), 5, nullptr, nullptr, 0)
                  .isOk());
  Device out(Bytes(cpu.size())), dValues(values), dDestination(destination);
  ASSERT_TRUE(device::weightedScatter(out.get(), 1, 3, DataType::kFloat32, dDestination.ints(), 5,
                                      dValues.get(), 5, nullptr, nullptr, nullptr)
                  .isOk());
  expectSame(out.bytes(), cpu, DataType::kFloat32, "weighted_scatter of inf and -inf");
  Bytes cpuSum(4);
  ASSERT_TRUE(sumOverAxes(values.data(), {5}, DataType::kFloat32, {0}, cpuSum.data(), 0).isOk());
  Device sum(Bytes(4));
  ASSERT_TRUE(
      device::sumOverAxes(dValues.get(), {5}, DataType::kFloat32, {0}, sum.get(), nullptr).isOk());
  expectSame(sum.bytes(), cpuSum, DataType::kFloat32, "sum of inf and -inf");
}

TEST(OpsGpu, PaddingAndLinearUpsamplingBackward) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  for (DataType t : testing::kFloatTypes) {
    const int64_t planes = 32;
    const Shape in{8, 28, 28}, out{16, 56, 56};
    const Bytes up = opValues(t, planes * 16 * 56 * 56, 81);
    Bytes cpu(planes * 8 * 28 * 28 * dataTypeSize(t));
    ASSERT_TRUE(
        upsampleLinearBackward(cpu.data(), up.data(), t, planes, in, out, false, {}, 0).isOk());
    Device dUp(up), dOut(Bytes(cpu.size()));
    ASSERT_TRUE(device::upsampleLinearBackward(dOut.get(), dUp.get(), t, planes, in, out, false, {},
                                               nullptr)
                    .isOk());
    expectSame(dOut.bytes(), cpu, t, "trilinear backward");
    const std::vector<int64_t> pad{3, 3, 2, 1, 1, 0};
    const Bytes pup = opValues(t, planes * 9 * 31 * 34, 82);
    Bytes pcpu(planes * 8 * 28 * 28 * dataTypeSize(t));
    ASSERT_TRUE(padBackward(pcpu.data(), pup.data(), t, planes, in, pad, true, 0).isOk());
    Device dPup(pup), dPout(Bytes(pcpu.size()));
    ASSERT_TRUE(
        device::padBackward(dPout.get(), dPup.get(), t, planes, in, pad, true, nullptr).isOk());
    expectSame(dPout.bytes(), pcpu, t, "reflection pad backward");
    AvgPool pool;
    pool.kernel = {3, 3, 3};
    pool.stride = {2, 2, 2};
    pool.padding = {1, 1, 1};
    pool.countIncludePad = false;
    Taps taps;
    std::vector<int64_t> divisors;
    ASSERT_TRUE(avgPoolTaps(in, pool, &taps, &divisors).isOk());
    const Bytes aup = opValues(t, planes * taps.outputs, 83);
    Bytes acpu(planes * 8 * 28 * 28 * dataTypeSize(t));
    ASSERT_TRUE(avgPoolBackward(acpu.data(), aup.data(), t, planes, in, pool, 0).isOk());
    Device dAup(aup), dAout(Bytes(acpu.size()));
    ASSERT_TRUE(
        device::avgPoolBackward(dAout.get(), dAup.get(), t, planes, in, pool, nullptr).isOk());
    expectSame(dAout.bytes(), acpu, t, "avg pool backward");
    const int64_t inner = 28 * 28 * 8, outputs = 4 * 14 * 14;
    const std::vector<int64_t> indices = opIndices(planes * outputs, 0, inner, 84);
    const Bytes mup = opValues(t, planes * outputs, 85);
    Bytes mcpu(planes * inner * dataTypeSize(t));
    ASSERT_TRUE(
        maxPoolBackward(mcpu.data(), mup.data(), indices.data(), t, planes, inner, outputs, 0)
            .isOk());
    Device dMup(mup), dIndices(indices), dMout(Bytes(mcpu.size()));
    ASSERT_TRUE(device::maxPoolBackward(dMout.get(), dMup.get(), dIndices.ints(), t, planes, inner,
                                        outputs, nullptr)
                    .isOk());
    expectSame(dMout.bytes(), mcpu, t, "max pool backward through indices");
  }
}

TEST(OpsGpu, SumsAndBiasGradients) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  for (DataType t : testing::kAllTypes) {
    const Shape shape{8, 64, 57, 33};
    const Bytes in = opValues(t, 8 * 64 * 57 * 33, 20);
    for (const std::vector<int>& axes :
         std::vector<std::vector<int>>{{0, 2, 3}, {0, 1, 2}, {1}, {3}}) {
      int64_t outCount = 1;
      for (int d = 0; d < 4; ++d) {
        if (std::find(axes.begin(), axes.end(), d) == axes.end()) outCount *= shape[d];
      }
      Bytes cpu(outCount * dataTypeSize(t));
      ASSERT_TRUE(sumOverAxes(in.data(), shape, t, axes, cpu.data(), 0).isOk());
      Device out(Bytes(cpu.size())), dIn(in);
      ASSERT_TRUE(device::sumOverAxes(dIn.get(), shape, t, axes, out.get(), nullptr).isOk());
      expectSame(out.bytes(), cpu, t, "sum over " + std::to_string(axes.size()) + " axes");
    }
    for (bool channelsFirst : {false, true}) {
      Bytes cpu((channelsFirst ? 64 : 33) * dataTypeSize(t));
      ASSERT_TRUE(biasAddGrad(in.data(), shape, t, channelsFirst, cpu.data(), 0).isOk());
      Device out(Bytes(cpu.size())), dIn(in);
      ASSERT_TRUE(
          device::biasAddGrad(dIn.get(), shape, t, channelsFirst, out.get(), nullptr).isOk());
      expectSame(out.bytes(), cpu, t, "bias_add_grad");
    }
  }
}

TEST(OpsGpu, BilinearAndMaxPool) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  for (DataType t : testing::kFloatTypes) {
    for (bool align : {false, true}) {
      for (int64_t out : {int64_t{13}, int64_t{77}, int64_t{256}}) {
        Bilinear s;
        s.planes = 24;
        s.inHeight = 31;
        s.inWidth = 40;
        s.outHeight = out;
        s.outWidth = out + 5;
        s.alignCorners = align;
        const Bytes grad = opValues(t, s.planes * s.outHeight * s.outWidth, 21);
        Bytes cpu(s.planes * s.inHeight * s.inWidth * dataTypeSize(t));
        ASSERT_TRUE(bilinear2dBackward(cpu.data(), grad.data(), t, s, 0).isOk());
        Device g(grad), result(Bytes(cpu.size()));
        ASSERT_TRUE(device::bilinear2dBackward(result.get(), g.get(), t, s, nullptr).isOk());
        expectSame(result.bytes(), cpu, t, "bilinear backward");
      }
    }
    Pool2d p;
    p.planes = 32;
    p.inHeight = 55;
    p.inWidth = 57;
    p.kernelHeight = p.kernelWidth = 3;
    p.strideHeight = p.strideWidth = 2;
    p.padHeight = p.padWidth = 1;
    p.ceilMode = true;
    int64_t oh = 0, ow = 0;
    ASSERT_TRUE(pool2dOutputSize(p, &oh, &ow).isOk());
    // Few distinct values: many ties.
    Bytes in(p.planes * 55 * 57 * dataTypeSize(t));
    const Bytes small = opValues(t, 8, 22);
    std::mt19937_64 g(23);
    for (size_t i = 0; i < in.size() / dataTypeSize(t); ++i) {
      std::memcpy(&in[i * dataTypeSize(t)], &small[(g() % 8) * dataTypeSize(t)], dataTypeSize(t));
    }
    Bytes cpuOut(p.planes * oh * ow * dataTypeSize(t));
    std::vector<int64_t> cpuIndex(p.planes * oh * ow);
    ASSERT_TRUE(maxPool2d(cpuOut.data(), cpuIndex.data(), in.data(), t, p, 0).isOk());
    Device dIn(in), dOut(Bytes(cpuOut.size())), dIndex(cpuIndex);
    ASSERT_TRUE(device::maxPool2d(dOut.get(), dIndex.ints(), dIn.get(), t, p, nullptr).isOk());
    expectSame(dOut.bytes(), cpuOut, t, "max_pool2d");
    EXPECT_EQ(dIndex.int64s(), cpuIndex);
    const Bytes grad = opValues(t, p.planes * oh * ow, 24);
    Bytes cpuBack(p.planes * 55 * 57 * dataTypeSize(t));
    ASSERT_TRUE(maxPool2dBackward(cpuBack.data(), grad.data(), cpuIndex.data(), t, p, 0).isOk());
    Device dGrad(grad), dBack(Bytes(cpuBack.size()));
    ASSERT_TRUE(
        device::maxPool2dBackward(dBack.get(), dGrad.get(), dIndex.ints(), t, p, nullptr).isOk());
    expectSame(dBack.bytes(), cpuBack, t, "max_pool2d backward");
  }
}

TEST(OpsGpu, BadIndicesGiveTheCpuErrorAndLeaveTheOutput) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU ops are");
  const DataType f = DataType::kFloat32;
  std::vector<int64_t> index = opIndices(1000, 0, 10, 25);
  index[700] = 10;
  index[900] = -2;
  const Bytes src = opValues(f, 1000, 26), base = opValues(f, 10, 27);
  Bytes cpu = base;
  const Status expected =
      scatterAdd(cpu.data(), {10}, f, 0, index.data(), {1000}, src.data(), {1000}, 0);
  Device self(base), dIndex(index), dSrc(src);
  const Status got = device::scatterAdd(self.get(), {10}, f, 0, dIndex.ints(), {1000}, dSrc.get(),
                                        {1000}, nullptr);
  EXPECT_FALSE(expected.isOk());
  EXPECT_EQ(got.code(), expected.code());
  EXPECT_EQ(got.message(), expected.message());
  expectSame(self.bytes(), base, f, "untouched output");
}

}  // namespace
}  // namespace detcoll::kernels::ops
