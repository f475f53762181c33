// kernels/ops/writes.h, cubic.h and scatter.h's sparse x dense: writeLast, max_unpool,
// embedding_bag's max gradient, sparse_dense_matmul, histc and bicubic upsampling's backward
// against loops written here (the last source found by scanning backwards; sums in source order;
// each value's bin in the stated arithmetic; each output's 16 products in output order), and the
// serial run of their device formulation (bodies/writes.h, bodies/taps.h) against the CPU
// reference: equal bits for every dtype, the same words for the same bad input.

#include "kernels/ops/writes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"
#include "kernels/ops/cubic.h"
#include "kernels/ops/scatter.h"
#include "kernels/ops/taps.h"
#include "tests/support/op_data.h"
#include "tests/support/serial_ops.h"

namespace detcoll::kernels::ops {
namespace {

using testing::opIndices;
using testing::opValues;
using Bytes = std::vector<uint8_t>;

void expectSame(const Bytes& actual, const Bytes& expected, DataType type, const char* aName,
                const char* bName, const std::string& what) {
  EXPECT_EQ(testing::bitsDiffer(actual, expected, type, aName, bName), "") << what;
}

void expectSameError(const Status& serial, const Status& reference, const std::string& words) {
  EXPECT_FALSE(reference.isOk()) << words;
  EXPECT_EQ(reference.message(), words);
  EXPECT_EQ(serial.code(), reference.code()) << words;
  EXPECT_EQ(serial.message(), reference.message()) << words;
}

std::vector<double> asDoubles(const Bytes& data, DataType t) {
  std::vector<double> v(data.size() / dataTypeSize(t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = testing::elementAsDouble(data.data(), i, t);
  return v;
}

TEST(WriteLast, TheLastSourceOfEachRowStaysInEveryDtype) {
  const int64_t rows = 40, width = 3, n = 500;  // heavy repetition, some rows never named
  const std::vector<int64_t> destination = opIndices(n, 0, rows - 5, 81);
  for (DataType t : testing::kAllTypes) {
    const size_t row = width * dataTypeSize(t);
    Bytes values = opValues(t, n * width, 82);
    if (t == DataType::kFloat32) {  // a NaN with a payload is copied as it is
      const uint32_t payload = 0x7fa00001u;
      std::memcpy(values.data() + (n - 1) * row, &payload, 4);
    }
    const Bytes before = opValues(t, rows * width, 83);
    Bytes expected = before;
    for (int64_t d = 0; d < rows; ++d) {
      for (int64_t s = n - 1; s >= 0; --s) {
        if (destination[s] != d) continue;
        std::memcpy(expected.data() + d * row, values.data() + s * row, row);
        break;
      }
    }
    Bytes reference = before, serial = before;
    ASSERT_TRUE(
        writeLast(reference.data(), rows, width, t, destination.data(), n, values.data()).isOk());
    ASSERT_TRUE(testing::serial::writeLast(serial.data(), rows, width, t, destination.data(), n,
                                           values.data())
                    .isOk());
    EXPECT_EQ(reference, expected) << dataTypeName(t);
    expectSame(serial, reference, t, "the serial run", "the reference", "write_last");
  }
  std::vector<int64_t> bad = destination;
  bad[77] = rows;
  Bytes a(rows * 4, 1), b(rows * 4, 1);
  const Bytes values(n * 4, 2);
  expectSameError(testing::serial::writeLast(a.data(), rows, 1, DataType::kFloat32, bad.data(), n,
                                             values.data()),
                  writeLast(b.data(), rows, 1, DataType::kFloat32, bad.data(), n, values.data()),
                  "write_last: destination[77] = 40 is out of range [0, 40)");
  EXPECT_EQ(a, Bytes(rows * 4, 1));  // untouched
  EXPECT_EQ(b, Bytes(rows * 4, 1));
}

TEST(MaxUnpool, EachPlaneWritesItsLastValuePerPositionAndZeroElsewhere) {
  const int64_t planes = 4, inputs = 30, outputs = 25;
  const std::vector<int64_t> indices = opIndices(planes * inputs, 0, outputs - 3, 84);
  for (DataType t : testing::kAllTypes) {
    const size_t size = dataTypeSize(t);
    const Bytes input = opValues(t, planes * inputs, 85);
    Bytes expected(planes * outputs * size, 0);
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t o = 0; o < outputs; ++o) {
        for (int64_t i = inputs - 1; i >= 0; --i) {
          if (indices[p * inputs + i] != o) continue;
          std::memcpy(expected.data() + (p * outputs + o) * size,
                      input.data() + (p * inputs + i) * size, size);
          break;
        }
      }
    }
    Bytes reference(expected.size(), 0xab), serial(expected.size(), 0xcd);
    ASSERT_TRUE(
        maxUnpool(reference.data(), input.data(), indices.data(), t, planes, inputs, outputs)
            .isOk());
    ASSERT_TRUE(testing::serial::maxUnpool(serial.data(), input.data(), indices.data(), t, planes,
                                           inputs, outputs)
                    .isOk());
    EXPECT_EQ(reference, expected) << dataTypeName(t);
    expectSame(serial, reference, t, "the serial run", "the reference", "max_unpool");
  }
  std::vector<int64_t> bad = indices;
  bad[41] = -1;
  Bytes a(planes * outputs * 4), b(planes * outputs * 4);
  const Bytes input(planes * inputs * 4, 7);
  expectSameError(
      testing::serial::maxUnpool(a.data(), input.data(), bad.data(), DataType::kFloat32, planes,
                                 inputs, outputs),
      maxUnpool(b.data(), input.data(), bad.data(), DataType::kFloat32, planes, inputs, outputs),
      "max_unpool: indices[41] = -1 is out of range [0, 25)");
}

TEST(EmbeddingBagMaxBackward, TakenMaximaAddInRowMajorOrder) {
  const int64_t numWeights = 9, bags = 40, dim = 5, padding = 4;
  std::vector<int64_t> rows = opIndices(bags * dim, -1, numWeights, 95);  // -1: an empty bag's
  std::vector<int64_t> size = opIndices(bags, 0, 4, 96);                  // some bags empty
  for (DataType t : testing::kFloatTypes) {
    const Bytes grad = opValues(t, bags * dim, 97);
    Bytes reference(numWeights * dim * dataTypeSize(t), 0xab), serial(reference.size(), 0xcd);
    ASSERT_TRUE(embeddingBagMaxBackward(reference.data(), numWeights, t, grad.data(), bags, dim,
                                        rows.data(), size.data(), padding, 2)
                    .isOk());
    ASSERT_TRUE(testing::serial::embeddingBagMaxBackward(serial.data(), numWeights, t, grad.data(),
                                                         bags, dim, rows.data(), size.data(),
                                                         padding)
                    .isOk());
    expectSame(serial, reference, t, "the serial run", "the reference", "embedding_bag max");
    if (t != DataType::kFloat64) continue;
    std::vector<double> g(bags * dim), expected(numWeights * dim, 0.0);
    std::memcpy(g.data(), grad.data(), grad.size());
    for (int64_t b = 0; b < bags; ++b) {
      for (int64_t c = 0; c < dim; ++c) {
        const int64_t r = rows[b * dim + c];
        if (size[b] > 0 && r >= 0 && r != padding) expected[r * dim + c] += g[b * dim + c];
      }
    }
    EXPECT_EQ(asDoubles(reference, t), expected);
  }
  rows[57] = numWeights;  // taken (bag 11 is not empty below) and outside the weights
  size[11] = 2;
  Bytes a(numWeights * dim * 4), b(a.size());
  const Bytes grad(bags * dim * 4, 0);
  expectSameError(testing::serial::embeddingBagMaxBackward(a.data(), numWeights, DataType::kFloat32,
                                                           grad.data(), bags, dim, rows.data(),
                                                           size.data(), -1),
                  embeddingBagMaxBackward(b.data(), numWeights, DataType::kFloat32, grad.data(),
                                          bags, dim, rows.data(), size.data(), -1, 1),
                  "embedding_bag_max_backward: maximum_indices[57] = 9 is out of range [0, 9)");
}

TEST(SparseDenseMatmul, EachRowAddsItsEntriesInOrder) {
  const int64_t outRows = 7, denseRows = 11, columns = 6, nnz = 300;     // rows repeat heavily
  const std::vector<int64_t> rows = opIndices(nnz, 0, outRows - 1, 98);  // the last row empty
  const std::vector<int64_t> cols = opIndices(nnz, 0, denseRows, 99);
  for (DataType t : testing::kFloatTypes) {
    const Bytes values = opValues(t, nnz, 100), dense = opValues(t, denseRows * columns, 101);
    Bytes reference(outRows * columns * dataTypeSize(t), 0xab), serial(reference.size(), 0xcd);
    ASSERT_TRUE(sparseDenseMatmul(reference.data(), outRows, t, rows.data(), cols.data(),
                                  values.data(), nnz, dense.data(), denseRows, columns, 2)
                    .isOk());
    ASSERT_TRUE(testing::serial::sparseDenseMatmul(serial.data(), outRows, t, rows.data(),
                                                   cols.data(), values.data(), nnz, dense.data(),
                                                   denseRows, columns)
                    .isOk());
    expectSame(serial, reference, t, "the serial run", "the reference", "sparse x dense");
    if (t != DataType::kFloat64) continue;
    const std::vector<double> v = asDoubles(values, t), d = asDoubles(dense, t);
    std::vector<double> expected(outRows * columns, 0.0);
    for (int64_t k = 0; k < nnz; ++k) {
      for (int64_t j = 0; j < columns; ++j) {
        expected[rows[k] * columns + j] += v[k] * d[cols[k] * columns + j];
      }
    }
    EXPECT_EQ(asDoubles(reference, t), expected);
  }
  std::vector<int64_t> badCols = cols;
  badCols[123] = denseRows;
  Bytes a(outRows * columns * 4), b(a.size());
  const Bytes values(nnz * 4, 0), dense(denseRows * columns * 4, 0);
  expectSameError(
      testing::serial::sparseDenseMatmul(a.data(), outRows, DataType::kFloat32, rows.data(),
                                         badCols.data(), values.data(), nnz, dense.data(),
                                         denseRows, columns),
      sparseDenseMatmul(b.data(), outRows, DataType::kFloat32, rows.data(), badCols.data(),
                        values.data(), nnz, dense.data(), denseRows, columns, 1),
      "sparse_dense_matmul: cols[123] = 11 is out of range [0, 11)");
  std::vector<int64_t> badRows = rows;
  badRows[5] = -3;
  expectSameError(
      testing::serial::sparseDenseMatmul(a.data(), outRows, DataType::kFloat32, badRows.data(),
                                         badCols.data(), values.data(), nnz, dense.data(),
                                         denseRows, columns),
      sparseDenseMatmul(b.data(), outRows, DataType::kFloat32, badRows.data(), badCols.data(),
                        values.data(), nnz, dense.data(), denseRows, columns, 1),
      "sparse_dense_matmul: rows[5] = -3 is out of range [0, 7)");
}

// histc's counts by a loop: x's bin floor((x - lo) * bins / (hi - lo)) in W, lo and hi rounded to
// the dtype first; wide: in double.
template <typename W>
std::vector<double> histcLoop(const std::vector<double>& x, int64_t bins, double lo, double hi) {
  const W l = static_cast<W>(lo), h = static_cast<W>(hi);
  std::vector<double> counts(bins, 0.0);
  for (double v : x) {
    const W w = static_cast<W>(v);
    if (!(w >= l && w <= h)) continue;
    const int64_t k = static_cast<int64_t>((w - l) * static_cast<W>(bins) / (h - l));
    counts[std::min<int64_t>(k, bins - 1)] += 1;
  }
  return counts;
}

double inDtype(double v, DataType t) {
  const float f = static_cast<float>(v);
  switch (t) {
    case DataType::kFloat64:
      return v;
    case DataType::kFloat32:
      return f;
    case DataType::kFloat16:
      return halfToFloat(floatToHalf(f));
    default:
      return bfloat16ToFloat(floatToBFloat16(f));
  }
}

TEST(Histc, BinsAgainstTheLoopInEveryFloatingDtype) {
  std::mt19937_64 g(86);
  for (DataType t : testing::kFloatTypes) {
    // Values on the edges of 7 bins over [-1, 2], random ones, a NaN, values outside.
    std::vector<double> x;
    for (int k = 0; k <= 21; ++k) x.push_back(-1.0 + 3.0 * k / 21);
    std::normal_distribution<double> normal(0.25, 1.7);
    for (int k = 0; k < 3000; ++k) x.push_back(normal(g));
    x.push_back(std::nan(""));
    const Bytes withNaN = testing::fromDoubles(x, t);
    // Without the NaN for the input's own range (with one, that range is refused).
    const Bytes finite(withNaN.begin(), withNaN.end() - dataTypeSize(t));
    for (auto [bins, lo, hi] : {std::tuple<int64_t, double, double>{7, -1.0, 2.0},
                                {100, -2.5, 1.75},
                                {1, 0.0, 0.0},
                                {300, 0.0, 0.0}}) {
      const Bytes& input = lo == hi ? finite : withNaN;
      const std::vector<double> stored = asDoubles(input, t);
      const int64_t n = static_cast<int64_t>(stored.size());
      double l = lo, h = hi;
      if (l == h) {  // the input's range
        l = std::numeric_limits<double>::infinity();
        h = -l;
        for (double v : stored) {
          if (v == v) l = std::min(l, v), h = std::max(h, v);
        }
      }
      std::vector<double> expected = t == DataType::kFloat64 ? histcLoop<double>(stored, bins, l, h)
                                                             : histcLoop<float>(stored, bins, l, h);
      if (t == DataType::kFloat16 || t == DataType::kBFloat16) {  // bounds rounded to the dtype
        auto to16 = [&](double v) {
          return t == DataType::kFloat16 ? halfToFloat(floatToHalf(static_cast<float>(v)))
                                         : bfloat16ToFloat(floatToBFloat16(static_cast<float>(v)));
        };
        expected = histcLoop<float>(stored, bins, to16(l), to16(h));
      }
      Bytes reference(bins * dataTypeSize(t)), serial(bins * dataTypeSize(t), 0xee);
      ASSERT_TRUE(histc(reference.data(), t, input.data(), n, bins, lo, hi).isOk());
      ASSERT_TRUE(testing::serial::histc(serial.data(), t, input.data(), n, bins, lo, hi).isOk());
      for (double& c : expected) c = inDtype(c, t);  // the exact count, converted once
      EXPECT_EQ(asDoubles(reference, t), expected) << dataTypeName(t) << " bins " << bins;
      expectSame(serial, reference, t, "the serial run", "the reference", "histc");
    }
  }
}

TEST(Histc, OverflowMovesEveryValueToDoubleAndBadRangesAreRefused) {
  // (x - lo) * bins overflows float32 for the largest value: every value is binned in double.
  const std::vector<double> x{-3e38, -1e38, 0.5, 1e38, 2.9e38, 3e38};
  const Bytes input = testing::fromDoubles(x, DataType::kFloat32);
  const std::vector<double> stored = asDoubles(input, DataType::kFloat32);
  const int64_t bins = 1000;
  Bytes reference(bins * 4), serial(bins * 4);
  ASSERT_TRUE(
      histc(reference.data(), DataType::kFloat32, input.data(), 6, bins, -3e38, 3e38).isOk());
  ASSERT_TRUE(
      testing::serial::histc(serial.data(), DataType::kFloat32, input.data(), 6, bins, -3e38, 3e38)
          .isOk());
  const double lo = static_cast<float>(-3e38), hi = static_cast<float>(3e38);
  std::vector<double> expected = histcLoop<double>(stored, bins, lo, hi);
  EXPECT_EQ(asDoubles(reference, DataType::kFloat32), expected);
  EXPECT_NE(expected, histcLoop<float>(stored, bins, lo, hi));  // float32 would have lost them
  expectSame(serial, reference, DataType::kFloat32, "the serial run", "the reference", "overflow");
  // An empty input counts nothing; a NaN makes the input's own range NaN, refused as torch does.
  Bytes two(16);
  ASSERT_TRUE(testing::serial::histc(two.data(), DataType::kFloat64, nullptr, 0, 2, 0, 1).isOk());
  EXPECT_EQ(asDoubles(two, DataType::kFloat64), (std::vector<double>{0, 0}));

  Bytes a(64), b(64);
  auto both = [&](DataType t, const void* in, int64_t n, int64_t k, double lo2, double hi2,
                  const std::string& words) {
    expectSameError(testing::serial::histc(a.data(), t, in, n, k, lo2, hi2),
                    histc(b.data(), t, in, n, k, lo2, hi2), words);
  };
  both(DataType::kFloat32, input.data(), 6, 0, 0, 1, "histc: bins must be > 0, got 0");
  both(DataType::kInt64, input.data(), 3, 4, 0, 1, "histc: dtype int64; floating point only");
  both(DataType::kFloat32, input.data(), 6, 4, 2, 1.5, "histc: max 1.5 must be larger than min 2");
  both(DataType::kFloat32, input.data(), 6, 4, 0, INFINITY,
       "histc: the range [0, inf] is not finite");
  both(DataType::kFloat32, input.data(), 6, 4, 0, 1e39,
       "histc: the range [0, 1e+39] is not finite in float32");
  both(DataType::kFloat16, input.data(), 3, 4, 1.0001, 1.0002,
       "histc: the range [1.0001, 1.0002] is empty in float16");
  both(DataType::kFloat32, nullptr, 6, 4, 0, 1, "histc: out or input is null");
  const Bytes nans = testing::fromDoubles({1.5, std::nan("")}, DataType::kFloat64);
  both(DataType::kFloat64, nans.data(), 2, 2, 0, 0, "histc: range of [nan, nan] is not finite");
}

// Bicubic's backward by a loop in float64: torch's coefficients per axis, then each output's 16
// products (x taps outer, y inner) added in output order.
TEST(BicubicBackward, MatchesTheLoopAndTheSerialRun) {
  const int64_t planes = 3;
  for (bool align : {false, true}) {
    const Shape in{5, 7}, out{9, 4};
    const std::vector<double> scales{align ? 0.0 : 1.7, 0.0};
    const Bytes up = opValues(DataType::kFloat64, planes * 36, 87);
    std::vector<double> g(planes * 36), expected(planes * 35, 0.0);
    std::memcpy(g.data(), up.data(), up.size());
    auto axis = [&](int64_t n, int64_t m, double scale, std::vector<int64_t>* idx,
                    std::vector<double>* w) {
      const double ratio = align ? (m > 1 ? double(n - 1) / double(m - 1) : 0.0)
                                 : (scale > 0 ? 1.0 / scale : double(n) / double(m));
      const double a = -0.75;
      auto near = [&](double x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };
      auto far = [&](double x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };
      for (int64_t o = 0; o < m; ++o) {
        const double r = align ? ratio * o : ratio * (o + 0.5) - 0.5, i = std::floor(r), t = r - i;
        const double c[4] = {far(t + 1), near(t), near(1 - t), far((1 - t) + 1)};
        for (int k = 0; k < 4; ++k) {
          idx->push_back(std::min<int64_t>(std::max<int64_t>(int64_t(i) - 1 + k, 0), n - 1));
          w->push_back(c[k]);
        }
      }
    };
    std::vector<int64_t> ty, tx;
    std::vector<double> wy, wx;
    axis(in[0], out[0], scales[0], &ty, &wy);
    axis(in[1], out[1], scales[1], &tx, &wx);
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t y = 0; y < out[0]; ++y) {
        for (int64_t x = 0; x < out[1]; ++x) {
          for (int kx = 0; kx < 4; ++kx) {
            for (int ky = 0; ky < 4; ++ky) {
              expected[p * 35 + ty[4 * y + ky] * 7 + tx[4 * x + kx]] +=
                  (g[p * 36 + y * 4 + x] * wy[4 * y + ky]) * wx[4 * x + kx];
            }
          }
        }
      }
    }
    Bytes reference(planes * 35 * 8);
    ASSERT_TRUE(upsampleBicubicBackward(reference.data(), up.data(), DataType::kFloat64, planes, in,
                                        out, align, scales, 2)
                    .isOk());
    EXPECT_EQ(asDoubles(reference, DataType::kFloat64), expected) << "align " << align;
    for (DataType t : testing::kFloatTypes) {
      const Bytes up2 = opValues(t, planes * 36, 88);
      Bytes ref(planes * 35 * dataTypeSize(t), 0xab), serial(ref.size(), 0xcd), one(ref.size());
      ASSERT_TRUE(
          upsampleBicubicBackward(ref.data(), up2.data(), t, planes, in, out, align, scales, 3)
              .isOk());
      ASSERT_TRUE(
          upsampleBicubicBackward(one.data(), up2.data(), t, planes, in, out, align, scales, 1)
              .isOk());
      ASSERT_TRUE(testing::serial::upsampleBicubicBackward(serial.data(), up2.data(), t, planes, in,
                                                           out, align, scales)
                      .isOk());
      expectSame(one, ref, t, "one thread", "three threads", "bicubic");
      expectSame(serial, ref, t, "the serial run", "the reference", "bicubic");
    }
  }
  // Equal sizes copy; bad arguments are refused in the same words.
  const Bytes up = opValues(DataType::kFloat32, 2 * 12, 89);
  Bytes copy(up.size()), serial(up.size());
  ASSERT_TRUE(upsampleBicubicBackward(copy.data(), up.data(), DataType::kFloat32, 2, {3, 4}, {3, 4},
                                      false, {}, 1)
                  .isOk());
  ASSERT_TRUE(testing::serial::upsampleBicubicBackward(serial.data(), up.data(), DataType::kFloat32,
                                                       2, {3, 4}, {3, 4}, false, {})
                  .isOk());
  EXPECT_EQ(copy, up);
  EXPECT_EQ(serial, up);
  Bytes a(64), b(64);
  expectSameError(
      testing::serial::upsampleBicubicBackward(a.data(), a.data(), DataType::kFloat32, 1, {3},
                                               {3, 4}, false, {}),
      upsampleBicubicBackward(b.data(), b.data(), DataType::kFloat32, 1, {3}, {3, 4}, false, {}, 1),
      "upsample_bicubic2d_backward: 2 spatial dimensions (and at most 2 scales)");
  expectSameError(testing::serial::upsampleBicubicBackward(a.data(), a.data(), DataType::kInt32, 1,
                                                           {3, 4}, {3, 4}, false, {}),
                  upsampleBicubicBackward(b.data(), b.data(), DataType::kInt32, 1, {3, 4}, {3, 4},
                                          false, {}, 1),
                  "upsample_bicubic2d_backward: dtype int32; floating point only");
  expectSameError(testing::serial::upsampleBicubicBackward(a.data(), a.data(), DataType::kFloat32,
                                                           1, {3, 0}, {3, 4}, false, {}),
                  upsampleBicubicBackward(b.data(), b.data(), DataType::kFloat32, 1, {3, 0}, {3, 4},
                                          false, {}, 1),
                  "upsample_bicubic2d_backward: a spatial size is 0 or negative");
}

}  // namespace
}  // namespace detcoll::kernels::ops
