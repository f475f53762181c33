// The GPU algorithm of the deterministic ops (kernels/ops/bodies/: radix sort by destination,
// segment offsets, one reduction per destination and column, tree levels, gathers), run by its
// serial run, against the CPU reference (scatter.h, axis_sums.h, resample.h): equal bits for every
// dtype on random wide-range values with heavy duplication, and the same error for the same bad
// input. On a GPU, tests/gpu/ops_gpu_test.cc holds the device to the same reference.

#include "tests/support/serial_ops.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops/axis_sums.h"
#include "kernels/ops/resample.h"
#include "kernels/ops/scatter.h"
#include "tests/support/op_data.h"
#include "tests/support/reference.h"

namespace detcoll::kernels::ops {
namespace {

using testing::opIndices;
using testing::opValues;
using Bytes = std::vector<uint8_t>;

void expectSame(const Bytes& actual, const Bytes& expected, DataType type,
                const std::string& what) {
  EXPECT_EQ(testing::bitsDiffer(actual, expected, type, "the serial run", "the reference"), "")
      << what;
}

void expectSameError(const Status& serial, const Status& reference, const std::string& what) {
  EXPECT_FALSE(reference.isOk()) << what;
  EXPECT_EQ(serial.code(), reference.code()) << what;
  EXPECT_EQ(serial.message(), reference.message()) << what;
}

TEST(SerialScatterAdd, OneDimensionCarriesValuesThroughTheSort) {
  // src longer than the index: position p adds src[p]. One thread takes the reference's one-pass
  // loop (index checked as it is added), two the split one.
  for (DataType t : testing::kAllTypes) {
    const int64_t n = 5000, m = 37;
    const std::vector<int64_t> index = opIndices(n, 0, m, 1);
    for (int64_t extra : {0, 17}) {
      const Bytes src = opValues(t, n + extra, 2), base = opValues(t, m, 3);
      Bytes serial = base;
      ASSERT_TRUE(testing::serial::scatterAdd(serial.data(), {m}, t, 0, index.data(), {n},
                                              src.data(), {n + extra})
                      .isOk());
      for (int threads : {1, 2}) {
        Bytes reference = base;
        ASSERT_TRUE(scatterAdd(reference.data(), {m}, t, 0, index.data(), {n}, src.data(),
                               {n + extra}, threads)
                        .isOk());
        expectSame(serial, reference, t,
                   "scatter_add 1-D " + dataTypeName(t) + " src +" + std::to_string(extra) +
                       ", threads " + std::to_string(threads));
      }
    }
  }
}

TEST(SerialScatterAdd, ABadIndexLateInTheOnePassLeavesTheOutputAsItWas) {
  // The one-pass loop adds blocks of the index before it reaches a bad entry: the output must
  // come back bit for bit, with the error the checked formulations give.
  for (DataType t : testing::kAllTypes) {
    const int64_t n = 20000, m = 50;
    for (int64_t badAt : {int64_t{5}, int64_t{9000}, n - 1}) {
      for (int64_t badValue : {m, int64_t{-1}}) {
        std::vector<int64_t> index = opIndices(n, 0, m, 4);
        index[badAt] = badValue;
        const Bytes src = opValues(t, n, 5), base = opValues(t, m, 6);
        Bytes serial = base, reference = base, indexed = base;
        const Status viaSerial = testing::serial::scatterAdd(serial.data(), {m}, t, 0, index.data(),
                                                             {n}, src.data(), {n});
        const Status viaReference =
            scatterAdd(reference.data(), {m}, t, 0, index.data(), {n}, src.data(), {n}, 1);
        const std::string what = "scatter_add " + dataTypeName(t) + " index[" +
                                 std::to_string(badAt) + "] = " + std::to_string(badValue);
        expectSameError(viaSerial, viaReference, what);
        EXPECT_NE(viaReference.message().find("index[" + std::to_string(badAt) + "]"),
                  std::string::npos)
            << viaReference.message();
        expectSame(reference, base, t, what);
        const Status viaIndexAdd =
            indexAdd(indexed.data(), {m}, t, 0, index.data(), n, src.data(), {n}, 1.0, 1);
        EXPECT_NE(viaIndexAdd.message().find("index_add: index[" + std::to_string(badAt) +
                                             "] = " + std::to_string(badValue)),
                  std::string::npos)
            << viaIndexAdd.message();
        expectSame(indexed, base, t, "index_add " + what);
      }
    }
  }
}

TEST(SerialScatterAdd, EveryDimWithSourcesShapedUnlikeTheIndex) {
  const Shape self{6, 5, 7}, src{9, 6, 8};
  for (DataType t : testing::kAllTypes) {
    for (int dim : {0, 1, 2, -1}) {
      const int d = dim < 0 ? dim + 3 : dim;
      Shape index{6, 5, 7};
      index[d] = src[d];
      const int64_t n = index[0] * index[1] * index[2];
      const std::vector<int64_t> where = opIndices(n, 0, self[d], 10 + d);
      const Bytes s = opValues(t, 9 * 6 * 8, 4), base = opValues(t, 6 * 5 * 7, 5);
      Bytes serial = base, reference = base;
      ASSERT_TRUE(testing::serial::scatterAdd(serial.data(), self, t, dim, where.data(), index,
                                              s.data(), src)
                      .isOk());
      ASSERT_TRUE(
          scatterAdd(reference.data(), self, t, dim, where.data(), index, s.data(), src, 2).isOk());
      expectSame(serial, reference, t, "scatter_add dim " + std::to_string(dim));
    }
  }
}

TEST(SerialIndexAdd, OuterSlicesAndAlpha) {
  for (DataType t : testing::kAllTypes) {
    const Shape self{3, 11, 4};
    const int64_t n = 300;
    const std::vector<int64_t> index = opIndices(n, 0, 11, 6);
    const Bytes source = opValues(t, 3 * n * 4, 7), base = opValues(t, 3 * 11 * 4, 8);
    for (double alpha : {1.0, -0.75, 3.0}) {
      Bytes serial = base, reference = base;
      const Status viaSerial = testing::serial::indexAdd(serial.data(), self, t, 1, index.data(), n,
                                                         source.data(), {3, n, 4}, alpha);
      const Status viaReference = indexAdd(reference.data(), self, t, 1, index.data(), n,
                                           source.data(), {3, n, 4}, alpha, 2);
      const std::string what = "index_add " + dataTypeName(t) + " alpha " + std::to_string(alpha);
      ASSERT_TRUE(viaSerial.isOk()) << what;  // an integer dtype truncates -0.75 to 0
      ASSERT_TRUE(viaReference.isOk()) << what;
      expectSame(serial, reference, t, what);
    }
  }
}

TEST(SerialUnsortedSegment, SumAndMeanWithDroppedIds) {
  for (DataType t : testing::kAllTypes) {
    for (bool mean : {false, true}) {
      const int64_t segments = 13;
      const std::vector<int64_t> ids = opIndices(40 * 3, -3, segments + 2, 9);  // some dropped
      std::vector<int64_t> clipped = ids;
      for (int64_t& id : clipped) id = id >= segments ? -1 : id;
      const Bytes data = opValues(t, 40 * 3 * 5, 10);
      Bytes serial(segments * 5 * dataTypeSize(t)), reference = serial;
      ASSERT_TRUE(testing::serial::unsortedSegmentReduce(serial.data(), segments, t, data.data(),
                                                         {40, 3, 5}, clipped.data(), 2, mean)
                      .isOk());
      ASSERT_TRUE(unsortedSegmentReduce(reference.data(), segments, t, data.data(), {40, 3, 5},
                                        clipped.data(), 2, mean, 2)
                      .isOk());
      expectSame(serial, reference, t, mean ? "segment mean" : "segment sum");
    }
  }
}

TEST(SerialEmbedding, PaddingAndFrequencyScaling) {
  for (DataType t : testing::kFloatTypes) {
    for (bool byFrequency : {false, true}) {
      const int64_t rows = 20, count = 700, dim = 6;
      const std::vector<int64_t> idx = opIndices(count, 0, rows, 11);
      const Bytes grad = opValues(t, count * dim, 12);
      Bytes serial(rows * dim * dataTypeSize(t)), reference = serial;
      ASSERT_TRUE(testing::serial::embeddingBackward(serial.data(), rows, t, grad.data(), count,
                                                     dim, idx.data(), 3, byFrequency)
                      .isOk());
      ASSERT_TRUE(embeddingBackward(reference.data(), rows, t, grad.data(), count, dim, idx.data(),
                                    3, byFrequency, 2)
                      .isOk());
      expectSame(serial, reference, t, byFrequency ? "embedding by frequency" : "embedding");
    }
  }
}

TEST(SerialEmbeddingBag, SumMeanAndPerSampleWeights) {
  for (DataType t : testing::kFloatTypes) {
    const int64_t rows = 15, count = 400, dim = 5, bags = 30;
    const std::vector<int64_t> idx = opIndices(count, 0, rows, 13);
    std::vector<int64_t> offsets = opIndices(bags, 0, count + 1, 14);
    std::sort(offsets.begin(), offsets.end());
    offsets[0] = 0;
    offsets[7] = offsets[8];  // an empty bag
    const Bytes grad = opValues(t, bags * dim, 15), weights = opValues(t, count, 16);
    for (int mode = 0; mode < 3; ++mode) {
      const bool mean = mode == 1;
      const void* psw = mode == 2 ? weights.data() : nullptr;
      Bytes serial(rows * dim * dataTypeSize(t)), reference = serial;
      ASSERT_TRUE(testing::serial::embeddingBagBackward(serial.data(), rows, t, grad.data(), bags,
                                                        dim, idx.data(), count, offsets.data(),
                                                        mean, psw, 2)
                      .isOk());
      ASSERT_TRUE(embeddingBagBackward(reference.data(), rows, t, grad.data(), bags, dim,
                                       idx.data(), count, offsets.data(), mean, psw, 2, 2)
                      .isOk());
      expectSame(serial, reference, t, "embedding_bag mode " + std::to_string(mode));
    }
  }
}

TEST(SerialWeightedScatter, PlanesRowsAndWeights) {
  for (DataType t : testing::kFloatTypes) {
    const int64_t planes = 4, outInner = 23, valuesInner = 500, n = 450;
    const std::vector<int64_t> destination = opIndices(n, 0, outInner, 41),
                               rows = opIndices(n, 0, 60, 42);
    const Bytes values = opValues(t, planes * valuesInner, 43);
    // Weights in the accumulation type: double for float64, float otherwise.
    const DataType wt = t == DataType::kFloat64 ? DataType::kFloat64 : DataType::kFloat32;
    const Bytes weights = opValues(wt, n, 44);
    for (int variant = 0; variant < 4; ++variant) {
      const int64_t* r = variant % 2 == 0 ? rows.data() : nullptr;
      const void* w = variant < 2 ? weights.data() : nullptr;
      // Different fills: a destination either formulation skipped would show.
      Bytes serial(planes * outInner * dataTypeSize(t), 0xab),
          reference(planes * outInner * dataTypeSize(t), 0xcd);
      ASSERT_TRUE(testing::serial::weightedScatter(serial.data(), planes, outInner, t,
                                                   destination.data(), n, values.data(),
                                                   valuesInner, r, w)
                      .isOk());
      ASSERT_TRUE(weightedScatter(reference.data(), planes, outInner, t, destination.data(), n,
                                  values.data(), valuesInner, r, w, 2)
                      .isOk());
      expectSame(serial, reference, t, "weighted_scatter variant " + std::to_string(variant));
    }
    {  // one plane, no rows, no weights (the values ride the sort); destinations left unwritten
      const std::vector<int64_t> half = opIndices(n, 0, outInner / 2, 45);
      Bytes serial(outInner * dataTypeSize(t), 0xab), reference(outInner * dataTypeSize(t), 0xcd);
      ASSERT_TRUE(testing::serial::weightedScatter(serial.data(), 1, outInner, t, half.data(), n,
                                                   values.data(), valuesInner, nullptr, nullptr)
                      .isOk());
      ASSERT_TRUE(weightedScatter(reference.data(), 1, outInner, t, half.data(), n, values.data(),
                                  valuesInner, nullptr, nullptr, 1)
                      .isOk());
      expectSame(serial, reference, t, "weighted_scatter, one plane");
    }
    for (int64_t p : {0, 3}) {  // no planes; no sources
      Bytes serial(3 * outInner * dataTypeSize(t), 0xab), reference = serial;
      ASSERT_TRUE(testing::serial::weightedScatter(serial.data(), p, outInner, t,
                                                   destination.data(), p ? 0 : n, values.data(),
                                                   valuesInner, rows.data(), nullptr)
                      .isOk());
      ASSERT_TRUE(weightedScatter(reference.data(), p, outInner, t, destination.data(), p ? 0 : n,
                                  values.data(), valuesInner, rows.data(), nullptr, 1)
                      .isOk());
      expectSame(serial, reference, t, "weighted_scatter edge " + std::to_string(p));
    }
    // The same words for the same bad input.
    std::vector<int64_t> bad = destination;
    bad[17] = outInner;
    Bytes a(planes * outInner * dataTypeSize(t)), b = a;
    expectSameError(
        testing::serial::weightedScatter(a.data(), planes, outInner, t, bad.data(), n,
                                         values.data(), valuesInner, rows.data(), nullptr),
        weightedScatter(b.data(), planes, outInner, t, bad.data(), n, values.data(), valuesInner,
                        rows.data(), nullptr, 1),
        "weighted_scatter destination");
    std::vector<int64_t> badRows = rows;
    badRows[5] = -1;
    expectSameError(
        testing::serial::weightedScatter(a.data(), planes, outInner, t, destination.data(), n,
                                         values.data(), valuesInner, badRows.data(), nullptr),
        weightedScatter(b.data(), planes, outInner, t, destination.data(), n, values.data(),
                        valuesInner, badRows.data(), nullptr, 1),
        "weighted_scatter rows");
  }
}

TEST(SerialTaps, PaddingAndLinearUpsamplingBackward) {
  for (DataType t : testing::kFloatTypes) {
    const int64_t planes = 3;
    for (bool reflect : {true, false}) {
      const Shape in{4, 5, 6};
      const std::vector<int64_t> pad = reflect ? std::vector<int64_t>{2, 1, 0, 3, 1, 2}
                                               : std::vector<int64_t>{-1, 4, 2, 0, 3, 1};
      const int64_t out = (6 + pad[0] + pad[1]) * (5 + pad[2] + pad[3]) * (4 + pad[4] + pad[5]);
      const Bytes up = opValues(t, planes * out, 71);
      Bytes serial(planes * 120 * dataTypeSize(t), 0xab),
          reference(planes * 120 * dataTypeSize(t), 0xcd);
      ASSERT_TRUE(
          testing::serial::padBackward(serial.data(), up.data(), t, planes, in, pad, reflect)
              .isOk());
      ASSERT_TRUE(padBackward(reference.data(), up.data(), t, planes, in, pad, reflect, 2).isOk());
      expectSame(serial, reference, t, reflect ? "reflection pad" : "replication pad");
    }
    for (bool align : {false, true}) {
      const Shape in{3, 4, 5}, out{7, 4, 9};
      const Bytes up = opValues(t, planes * 252, 72);
      Bytes serial(planes * 60 * dataTypeSize(t), 0xab),
          reference(planes * 60 * dataTypeSize(t), 0xcd);
      ASSERT_TRUE(testing::serial::upsampleLinearBackward(serial.data(), up.data(), t, planes, in,
                                                          out, align, {2.3, 0, 1.8})
                      .isOk());
      ASSERT_TRUE(upsampleLinearBackward(reference.data(), up.data(), t, planes, in, out, align,
                                         {2.3, 0, 1.8}, 2)
                      .isOk());
      expectSame(serial, reference, t, "trilinear");
    }
    for (int variant = 0; variant < 3; ++variant) {  // average pooling, plain
      AvgPool pool;
      pool.kernel = {3, 2, 3};
      pool.stride = {2, 2, 1};
      pool.padding = {1, 0, 1};
      pool.ceilMode = variant != 1;
      pool.countIncludePad = variant == 0;
      pool.divisorOverride = variant == 1 ? 5 : 0;
      const Shape in{5, 6, 7};
      Taps taps;
      std::vector<int64_t> divisors;
      ASSERT_TRUE(avgPoolTaps(in, pool, &taps, &divisors).isOk());
      const Bytes up = opValues(t, planes * taps.outputs, 73 + variant);
      Bytes serial(planes * 210 * dataTypeSize(t), 0xab),
          reference(planes * 210 * dataTypeSize(t), 0xcd);
      ASSERT_TRUE(
          testing::serial::avgPoolBackward(serial.data(), up.data(), t, planes, in, pool).isOk());
      ASSERT_TRUE(avgPoolBackward(reference.data(), up.data(), t, planes, in, pool, 2).isOk());
      expectSame(serial, reference, t, "avg pool variant " + std::to_string(variant));
    }
    {  // adaptive
      const Shape in{5, 6, 7}, out{3, 4, 2};
      const Bytes up = opValues(t, planes * 24, 77);
      Bytes serial(planes * 210 * dataTypeSize(t), 0xab),
          reference(planes * 210 * dataTypeSize(t), 0xcd);
      ASSERT_TRUE(
          testing::serial::adaptiveAvgPoolBackward(serial.data(), up.data(), t, planes, in, out)
              .isOk());
      ASSERT_TRUE(
          adaptiveAvgPoolBackward(reference.data(), up.data(), t, planes, in, out, 2).isOk());
      expectSame(serial, reference, t, "adaptive avg pool");
    }
    {  // max pooling through indices
      const int64_t inner = 30, outputs = 80;
      const std::vector<int64_t> indices = opIndices(planes * outputs, 0, inner, 78);
      const Bytes up = opValues(t, planes * outputs, 79);
      Bytes serial(planes * inner * dataTypeSize(t), 0xab),
          reference(planes * inner * dataTypeSize(t), 0xcd);
      ASSERT_TRUE(testing::serial::maxPoolBackward(serial.data(), up.data(), indices.data(), t,
                                                   planes, inner, outputs)
                      .isOk());
      ASSERT_TRUE(
          maxPoolBackward(reference.data(), up.data(), indices.data(), t, planes, inner, outputs, 2)
              .isOk());
      expectSame(serial, reference, t, "max pool backward");
      std::vector<int64_t> bad = indices;
      bad[33] = -2;
      expectSameError(
          testing::serial::maxPoolBackward(serial.data(), up.data(), bad.data(), t, planes, inner,
                                           outputs),
          maxPoolBackward(reference.data(), up.data(), bad.data(), t, planes, inner, outputs, 1),
          "max pool index");
    }
    // The same words for the same bad input.
    Bytes a(64), b(64);
    expectSameError(testing::serial::padBackward(a.data(), a.data(), t, 1, {3}, {3, 0}, true),
                    padBackward(b.data(), b.data(), t, 1, {3}, {3, 0}, true, 1),
                    "reflection too wide");
  }
}

TEST(SerialBincount, WeightsAndCounts) {
  const std::vector<int64_t> input = opIndices(3000, 0, 50, 17);
  for (DataType t : testing::kAllTypes) {
    const Bytes weights = opValues(t, 3000, 18);
    int64_t length = 0, referenceLength = 0;
    Bytes serial(64 * dataTypeSize(t)), reference = serial;
    ASSERT_TRUE(
        testing::serial::bincount(serial.data(), &length, t, input.data(), 3000, weights.data(), 64)
            .isOk());
    ASSERT_TRUE(
        bincount(reference.data(), &referenceLength, t, input.data(), 3000, weights.data(), 64, 2)
            .isOk());
    EXPECT_EQ(length, referenceLength);
    expectSame(serial, reference, t, "weighted bincount");
  }
  int64_t length = 0;
  Bytes serial(50 * 8), reference(50 * 8);
  ASSERT_TRUE(testing::serial::bincount(serial.data(), &length, DataType::kInt64, input.data(),
                                        3000, nullptr, 0)
                  .isOk());
  ASSERT_EQ(length, 50);
  ASSERT_TRUE(
      bincount(reference.data(), &length, DataType::kInt64, input.data(), 3000, nullptr, 0, 2)
          .isOk());
  expectSame(serial, reference, DataType::kInt64, "bincount");
}

TEST(SerialSum, TreeLevelsEqualTheReferenceForEveryLayout) {
  const Shape shape{5, 33, 7, 9};
  const std::vector<std::vector<int>> axesList = {{0},    {1},    {3},          {0, 2}, {1, 3},
                                                  {1, 2}, {2, 3}, {0, 1, 2, 3}, {}};
  for (DataType t : testing::kAllTypes) {
    const Bytes in = opValues(t, 5 * 33 * 7 * 9, 19);
    for (const auto& axes : axesList) {
      int64_t outCount = 1;
      for (int d = 0; d < 4; ++d) {
        if (std::find(axes.begin(), axes.end(), d) == axes.end()) outCount *= shape[d];
      }
      Bytes serial(outCount * dataTypeSize(t)), reference = serial;
      ASSERT_TRUE(testing::serial::sumOverAxes(in.data(), shape, t, axes, serial.data()).isOk());
      ASSERT_TRUE(sumOverAxes(in.data(), shape, t, axes, reference.data(), 2).isOk());
      expectSame(serial, reference, t, "sum over " + std::to_string(axes.size()) + " axes");
    }
  }
}

TEST(SerialBiasAddGrad, LongColumnsNeedManyLevels) {
  for (DataType t : testing::kFloatTypes) {
    for (bool channelsFirst : {false, true}) {
      const Shape shape = channelsFirst ? Shape{4, 3, 41, 43} : Shape{4, 41, 43, 3};
      const Bytes grad = opValues(t, 4 * 41 * 43 * 3, 20);
      Bytes serial(3 * dataTypeSize(t)), reference = serial;
      ASSERT_TRUE(
          testing::serial::biasAddGrad(grad.data(), shape, t, channelsFirst, serial.data()).isOk());
      ASSERT_TRUE(biasAddGrad(grad.data(), shape, t, channelsFirst, reference.data(), 2).isOk());
      expectSame(serial, reference, t, channelsFirst ? "bias grad NCHW" : "bias grad NHWC");
    }
  }
}

TEST(SerialResample, BilinearAndMaxPool) {
  for (DataType t : testing::kFloatTypes) {
    Bilinear s;
    s.planes = 3;
    s.inHeight = 7;
    s.inWidth = 5;
    s.outHeight = 16;
    s.outWidth = 3;
    for (bool align : {false, true}) {
      s.alignCorners = align;
      const Bytes grad = opValues(t, 3 * 16 * 3, 21);
      Bytes serial(3 * 7 * 5 * dataTypeSize(t)), reference = serial;
      ASSERT_TRUE(testing::serial::bilinear2dBackward(serial.data(), grad.data(), t, s).isOk());
      ASSERT_TRUE(bilinear2dBackward(reference.data(), grad.data(), t, s, 2).isOk());
      expectSame(serial, reference, t, "bilinear backward");
    }
    Pool2d p;
    p.planes = 4;
    p.inHeight = 13;
    p.inWidth = 11;
    p.kernelHeight = 3;
    p.kernelWidth = 2;
    p.strideHeight = 2;
    p.strideWidth = 1;
    p.padHeight = 1;
    p.ceilMode = true;
    int64_t oh = 0, ow = 0;
    ASSERT_TRUE(pool2dOutputSize(p, &oh, &ow).isOk());
    const Bytes in = opValues(t, 4 * 13 * 11, 22), grad = opValues(t, 4 * oh * ow, 23);
    Bytes out(4 * oh * ow * dataTypeSize(t)), reference = out;
    std::vector<int64_t> index(4 * oh * ow), referenceIndex = index;
    ASSERT_TRUE(testing::serial::maxPool2d(out.data(), index.data(), in.data(), t, p).isOk());
    ASSERT_TRUE(maxPool2d(reference.data(), referenceIndex.data(), in.data(), t, p, 2).isOk());
    expectSame(out, reference, t, "max_pool2d");
    EXPECT_EQ(index, referenceIndex);
    Bytes serial(4 * 13 * 11 * dataTypeSize(t)), back = serial;
    ASSERT_TRUE(
        testing::serial::maxPool2dBackward(serial.data(), grad.data(), index.data(), t, p).isOk());
    ASSERT_TRUE(maxPool2dBackward(back.data(), grad.data(), index.data(), t, p, 2).isOk());
    expectSame(serial, back, t, "max_pool2d backward");
  }
}

TEST(SerialErrors, ChecksAddedForTheCEntriesGiveTheSameWords) {
  const DataType f = DataType::kFloat32;
  float self = 1.0f;
  const std::vector<float> source(5, 2.0f);
  const std::vector<int64_t> zeros(5, 0);
  expectSameError(testing::serial::indexAdd(&self, {}, f, 0, zeros.data(), 5, source.data(), {}, 1),
                  indexAdd(&self, {}, f, 0, zeros.data(), 5, source.data(), {}, 1, 1),
                  "index_add 0-d");
  std::vector<int32_t> ints(4, 1);
  const std::vector<int32_t> intSource(2, 3);
  expectSameError(testing::serial::indexAdd(ints.data(), {4}, DataType::kInt32, 0, zeros.data(), 2,
                                            intSource.data(), {2}, 3e9),
                  indexAdd(ints.data(), {4}, DataType::kInt32, 0, zeros.data(), 2, intSource.data(),
                           {2}, 3e9, 1),
                  "index_add alpha");
  const std::vector<int64_t> largest{2, std::numeric_limits<int64_t>::max()};
  int64_t serialLength = -1, length = -1;
  expectSameError(testing::serial::bincount(nullptr, &serialLength, DataType::kInt64,
                                            largest.data(), 2, nullptr, 0),
                  bincount(nullptr, &length, DataType::kInt64, largest.data(), 2, nullptr, 0, 1),
                  "bincount largest");
  EXPECT_EQ(serialLength, -1);
  std::vector<float> grid(6);
  expectSameError(testing::serial::scatterAdd(grid.data(), {2, 3}, f, 0, nullptr, {1, 3},
                                              source.data(), {1, 3}),
                  scatterAdd(grid.data(), {2, 3}, f, 0, nullptr, {1, 3}, source.data(), {1, 3}, 1),
                  "scatter_add null index");
  std::vector<float> weights(6);
  const std::vector<int64_t> ids{0, 1, 2};
  expectSameError(testing::serial::embeddingBagBackward(weights.data(), 3, f, source.data(), 2, 1,
                                                        ids.data(), 3, nullptr, false, nullptr, -1),
                  embeddingBagBackward(weights.data(), 3, f, source.data(), 2, 1, ids.data(), 3,
                                       nullptr, false, nullptr, -1, 1),
                  "embedding_bag null offsets");
}

TEST(SerialErrors, TheSameInputIsRefusedInTheSameWords) {
  const DataType f = DataType::kFloat32;
  std::vector<float> self(10), src(6, 1.0f);
  std::vector<int64_t> bad{1, 2, 10, 3, -1, 4};
  expectSameError(
      testing::serial::scatterAdd(self.data(), {10}, f, 0, bad.data(), {6}, src.data(), {6}),
      scatterAdd(self.data(), {10}, f, 0, bad.data(), {6}, src.data(), {6}, 1), "scatter_add 1-D");
  std::vector<float> grid(12), gsrc(12, 1.0f);
  std::vector<int64_t> badGrid{0, 1, 2, 0, 1, 7, 0, 0, 0, 0, 0, 0};
  expectSameError(
      testing::serial::scatterAdd(grid.data(), {3, 4}, f, 0, badGrid.data(), {3, 4}, gsrc.data(),
                                  {3, 4}),
      scatterAdd(grid.data(), {3, 4}, f, 0, badGrid.data(), {3, 4}, gsrc.data(), {3, 4}, 1),
      "scatter_add 2-D");
  EXPECT_EQ(grid, std::vector<float>(12));
  expectSameError(
      testing::serial::indexAdd(self.data(), {10}, f, 0, bad.data(), 6, src.data(), {6}, 1.0),
      indexAdd(self.data(), {10}, f, 0, bad.data(), 6, src.data(), {6}, 1.0, 1), "index_add");
  expectSameError(testing::serial::embeddingBackward(self.data(), 5, f, src.data(), 6, 1,
                                                     bad.data(), -1, false),
                  embeddingBackward(self.data(), 5, f, src.data(), 6, 1, bad.data(), -1, false, 1),
                  "embedding");
  std::vector<int64_t> ok{0, 1, 2, 3, 4, 0}, offsets{0, 4, 2};
  expectSameError(
      testing::serial::embeddingBagBackward(self.data(), 5, f, src.data(), 3, 1, ok.data(), 6,
                                            offsets.data(), false, nullptr, -1),
      embeddingBagBackward(self.data(), 5, f, src.data(), 3, 1, ok.data(), 6, offsets.data(), false,
                           nullptr, -1, 1),
      "embedding_bag offsets");
  int64_t length = 0;
  expectSameError(testing::serial::bincount(self.data(), &length, f, bad.data(), 6, src.data(), 0),
                  bincount(self.data(), &length, f, bad.data(), 6, src.data(), 0, 1), "bincount");
  expectSameError(testing::serial::sumOverAxes(src.data(), {2, 3}, f, {0, -2}, self.data()),
                  sumOverAxes(src.data(), {2, 3}, f, {0, -2}, self.data(), 1), "sum");
  expectSameError(testing::serial::biasAddGrad(src.data(), {6}, f, false, self.data()),
                  biasAddGrad(src.data(), {6}, f, false, self.data(), 1), "bias_add_grad");
  EXPECT_EQ(self, std::vector<float>(10));
  Pool2d pool;
  pool.planes = 2;
  pool.inHeight = pool.inWidth = 6;
  pool.kernelHeight = pool.kernelWidth = 2;
  pool.strideHeight = pool.strideWidth = 2;
  std::vector<float> in(72), out(18), grad(18, 1.0f), back(72, 0.0f);
  std::vector<int64_t> index(18);
  ASSERT_TRUE(maxPool2d(out.data(), index.data(), in.data(), f, pool, 1).isOk());
  for (int64_t wrong : {int64_t{2}, int64_t{-1}, int64_t{36}}) {  // the next window's, outside
    std::vector<int64_t> broken = index;
    broken[13] = wrong;
    expectSameError(
        testing::serial::maxPool2dBackward(back.data(), grad.data(), broken.data(), f, pool),
        maxPool2dBackward(back.data(), grad.data(), broken.data(), f, pool, 1),
        "max_pool2d_backward index " + std::to_string(wrong));
  }
  EXPECT_EQ(back, std::vector<float>(72, 0.0f));
}

}  // namespace
}  // namespace detcoll::kernels::ops
