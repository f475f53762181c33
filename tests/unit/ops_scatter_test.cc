// kernels/ops/scatter.h: each op against the plain loop that defines it (every source added to
// its destination in source order, float accumulation written out here), on random wide-range
// float32 values with many duplicate indices; equal bits for 1 and 2 threads and for shuffled
// inputs whose order the op does not see; the argument checks.

#include "kernels/ops/scatter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/support/op_data.h"
#include "tests/support/reference.h"

namespace detcoll::kernels::ops {
namespace {

std::vector<int64_t> indices(size_t n, int64_t m, std::mt19937_64& g) {
  std::uniform_int_distribution<int64_t> pick(0, m - 1);
  std::vector<int64_t> v(n);
  for (int64_t& x : v) x = pick(g);
  return v;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(ScatterAdd, EveryDimMatchesTheLoopAndIgnoresThreads) {
  std::mt19937_64 g(11);
  const Shape self{7, 5, 6}, src{9, 6, 8}, index{9, 5, 6};  // index <= src; <= self off dim
  for (int dim : {0, 1, 2, -1}) {
    const int d = dim < 0 ? dim + 3 : dim;
    Shape idx = index;
    idx[d] = d == 0 ? 9 : (d == 1 ? 6 : 8);  // along dim the index may exceed self
    if (d != 0) idx[0] = 7;
    if (d != 1) idx[1] = 5;
    if (d != 2) idx[2] = 6;
    const int64_t n = idx[0] * idx[1] * idx[2];
    const std::vector<int64_t> where = indices(n, self[d], g);
    const std::vector<float> values = testing::wideFloats(9 * 6 * 8, g);
    const std::vector<float> base = testing::wideFloats(7 * 5 * 6, g);
    std::vector<float> expected = base;
    for (int64_t i = 0; i < idx[0]; ++i)
      for (int64_t j = 0; j < idx[1]; ++j)
        for (int64_t k = 0; k < idx[2]; ++k) {
          int64_t c[3] = {i, j, k};
          const int64_t p = (i * idx[1] + j) * idx[2] + k;
          const float v = values[(i * src[1] + j) * src[2] + k];
          c[d] = where[p];
          float& out = expected[(c[0] * self[1] + c[1]) * self[2] + c[2]];
          out = out + v;
        }
    for (int threads : {1, 2}) {
      std::vector<float> out = base;
      ASSERT_TRUE(scatterAdd(out.data(), self, DataType::kFloat32, dim, where.data(), idx,
                             values.data(), src, threads)
                      .isOk());
      EXPECT_TRUE(sameBits(out, expected)) << "dim " << dim << " threads " << threads;
    }
  }
}

TEST(IndexAdd, MiddleDimWithAlphaMatchesTheLoop) {
  std::mt19937_64 g(12);
  const Shape self{3, 40, 5};
  const int64_t n = 500;
  const Shape source{3, n, 5};
  const std::vector<int64_t> where = indices(n, 40, g);
  const std::vector<float> values = testing::wideFloats(3 * n * 5, g),
                           base = testing::wideFloats(3 * 40 * 5, g);
  for (double alpha : {1.0, -0.375}) {
    std::vector<float> expected = base;
    for (int64_t o = 0; o < 3; ++o)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < 5; ++k) {
          float& out = expected[(o * 40 + where[i]) * 5 + k];
          out = out + static_cast<float>(alpha) * values[(o * n + i) * 5 + k];
        }
    for (int threads : {1, 2}) {
      std::vector<float> out = base;
      ASSERT_TRUE(indexAdd(out.data(), self, DataType::kFloat32, 1, where.data(), n, values.data(),
                           source, alpha, threads)
                      .isOk());
      EXPECT_TRUE(sameBits(out, expected)) << "alpha " << alpha << " threads " << threads;
    }
  }
}

TEST(UnsortedSegment, SumAndMeanDropNegativeIds) {
  std::mt19937_64 g(13);
  const int64_t n = 3000, segments = 11, row = 4;
  std::vector<int64_t> ids = indices(n, segments + 2, g);
  for (int64_t& id : ids) id -= 2;  // some -1 and -2: dropped
  const std::vector<float> data = testing::wideFloats(n * row, g);
  std::vector<float> sum(segments * row, 0.0f);
  std::vector<int64_t> count(segments, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0) continue;
    ++count[ids[i]];
    for (int64_t c = 0; c < row; ++c) sum[ids[i] * row + c] += data[i * row + c];
  }
  std::vector<float> out(segments * row, 7.0f);
  ASSERT_TRUE(unsortedSegmentReduce(out.data(), segments, DataType::kFloat32, data.data(), {n, row},
                                    ids.data(), 1, false, 2)
                  .isOk());
  EXPECT_TRUE(sameBits(out, sum));
  std::vector<float> mean = sum;
  for (int64_t k = 0; k < segments; ++k)
    for (int64_t c = 0; c < row; ++c)
      mean[k * row + c] = count[k] ? sum[k * row + c] / static_cast<float>(count[k]) : 0.0f;
  ASSERT_TRUE(unsortedSegmentReduce(out.data(), segments, DataType::kFloat32, data.data(), {n, row},
                                    ids.data(), 1, true, 1)
                  .isOk());
  EXPECT_TRUE(sameBits(out, mean));
  ids[17] = segments;
  const Status s = unsortedSegmentReduce(out.data(), segments, DataType::kFloat32, data.data(),
                                         {n, row}, ids.data(), 1, false, 1);
  EXPECT_NE(s.message().find("unsorted_segment_sum: segment_ids[17] = 11 is out of range"),
            std::string::npos)
      << s.message();
}

TEST(Embedding, BackwardWithPaddingAndFrequencyScaling) {
  std::mt19937_64 g(14);
  const int64_t n = 4000, m = 30, dim = 8, padding = 3;
  const std::vector<int64_t> idx = indices(n, m, g);
  const std::vector<float> grad = testing::wideFloats(n * dim, g);
  for (bool byFreq : {false, true}) {
    std::vector<int64_t> freq(m, 0);
    for (int64_t k : idx) ++freq[k];
    std::vector<float> expected(m * dim, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      if (idx[i] == padding) continue;
      const float w = byFreq ? 1.0f / static_cast<float>(freq[idx[i]]) : 1.0f;
      for (int64_t c = 0; c < dim; ++c) {
        float& out = expected[idx[i] * dim + c];
        out = byFreq ? out + w * grad[i * dim + c] : out + grad[i * dim + c];
      }
    }
    for (int threads : {1, 2}) {
      std::vector<float> out(m * dim, -1.0f);
      ASSERT_TRUE(embeddingBackward(out.data(), m, DataType::kFloat32, grad.data(), n, dim,
                                    idx.data(), padding, byFreq, threads)
                      .isOk());
      EXPECT_TRUE(sameBits(out, expected)) << "by frequency " << byFreq;
    }
  }
}

TEST(EmbeddingBag, SumMeanAndPerSampleWeights) {
  std::mt19937_64 g(15);
  const int64_t bags = 50, m = 20, dim = 4, padding = 5;
  std::vector<int64_t> offsets{0};
  for (int64_t b = 1; b < bags; ++b) offsets.push_back(offsets.back() + (g() % 9));  // some empty
  const int64_t n = offsets.back() + 6;
  const std::vector<int64_t> idx = indices(n, m, g);
  const std::vector<float> grad = testing::wideFloats(bags * dim, g),
                           psw = testing::wideFloats(n, g);
  auto bagOf = [&](int64_t k) {
    return static_cast<int64_t>(std::upper_bound(offsets.begin(), offsets.end(), k) -
                                offsets.begin()) -
           1;
  };
  for (int variant = 0; variant < 3; ++variant) {  // sum, sum with weights, mean
    std::vector<int64_t> size(bags, 0);
    for (int64_t k = 0; k < n; ++k) size[bagOf(k)] += idx[k] != padding;
    std::vector<float> expected(m * dim, 0.0f);
    for (int64_t k = 0; k < n; ++k) {
      if (idx[k] == padding) continue;
      const int64_t b = bagOf(k);
      for (int64_t c = 0; c < dim; ++c) {
        float& out = expected[idx[k] * dim + c];
        const float v = grad[b * dim + c];
        if (variant == 0) out = out + v;
        if (variant == 1) out = out + psw[k] * v;
        if (variant == 2)
          out = out + (1.0f / static_cast<float>(std::max<int64_t>(1, size[b]))) * v;
      }
    }
    std::vector<float> out(m * dim, 3.0f);
    ASSERT_TRUE(embeddingBagBackward(out.data(), m, DataType::kFloat32, grad.data(), bags, dim,
                                     idx.data(), n, offsets.data(), variant == 2,
                                     variant == 1 ? psw.data() : nullptr, padding, 2)
                    .isOk());
    EXPECT_TRUE(sameBits(out, expected)) << "variant " << variant;
  }
  std::vector<int64_t> bad = offsets;
  bad[3] = bad[2] - 1;
  std::vector<float> out(m * dim);
  const Status s = embeddingBagBackward(out.data(), m, DataType::kFloat32, grad.data(), bags, dim,
                                        idx.data(), n, bad.data(), false, nullptr, -1, 1);
  // The offset that breaks the order is named: the one below its predecessor.
  EXPECT_NE(s.message().find("offsets[3] = " + std::to_string(bad[3]) + " breaks the rule"),
            std::string::npos)
      << s.message();
}

TEST(Bincount, WeightsAndCounts) {
  std::mt19937_64 g(16);
  const int64_t n = 10000;
  const std::vector<int64_t> input = indices(n, 37, g);
  const std::vector<float> weights = testing::wideFloats(n, g);
  int64_t length = 0;
  ASSERT_TRUE(bincount(nullptr, &length, DataType::kFloat32, input.data(), n, weights.data(), 50, 1)
                  .isOk());
  EXPECT_EQ(length, 50);
  std::vector<float> expected(50, 0.0f), out(50, 1.0f);
  for (int64_t i = 0; i < n; ++i) expected[input[i]] += weights[i];
  ASSERT_TRUE(
      bincount(out.data(), &length, DataType::kFloat32, input.data(), n, weights.data(), 50, 2)
          .isOk());
  EXPECT_TRUE(sameBits(out, expected));
  std::vector<int64_t> counts(37, -1), expectedCounts(37, 0);
  for (int64_t v : input) ++expectedCounts[v];
  ASSERT_TRUE(
      bincount(counts.data(), &length, DataType::kInt64, input.data(), n, nullptr, 0, 1).isOk());
  EXPECT_EQ(counts, expectedCounts);
  EXPECT_EQ(length, 37);
  // No input, weights of no elements (an empty tensor's pointer is null): minlength zeros of
  // the weights' dtype, nothing written past them.
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16}) {
    std::vector<uint8_t> zeros(4 * 8 + 16, 0xab);
    ASSERT_TRUE(bincount(zeros.data(), &length, t, nullptr, 0, nullptr, 4, 1).isOk());
    EXPECT_EQ(length, 4);
    const size_t bytes = 4 * dataTypeSize(t);
    EXPECT_EQ(std::vector<uint8_t>(zeros.begin(), zeros.begin() + bytes),
              std::vector<uint8_t>(bytes, 0));
    EXPECT_EQ(zeros[bytes], 0xab) << dataTypeName(t);
  }
  const std::vector<int64_t> negative{1, -2};
  const Status s =
      bincount(out.data(), &length, DataType::kFloat32, negative.data(), 2, weights.data(), 0, 1);
  EXPECT_NE(s.message().find("bincount: input[1] = -2 is negative"), std::string::npos)
      << s.message();
  // The largest value and the first negative one, wherever they sit (the scan runs four
  // positions at a time, then the rest).
  for (int64_t at = 0; at < 11; ++at) {
    std::vector<int64_t> v(11, 1);
    v[at] = 5;
    ASSERT_TRUE(bincount(nullptr, &length, DataType::kInt64, v.data(), 11, nullptr, 0, 1).isOk());
    EXPECT_EQ(length, 6) << "largest at " << at;
    v[at] = -3;
    if (at + 2 < 11) v[at + 2] = -4;
    const Status bad = bincount(nullptr, &length, DataType::kInt64, v.data(), 11, nullptr, 0, 1);
    EXPECT_NE(bad.message().find("input[" + std::to_string(at) + "] = -3 is negative"),
              std::string::npos)
        << bad.message();
  }
}

TEST(WeightedScatter, PlanesRowsAndWeightsMatchTheLoop) {
  std::mt19937_64 g(31);
  const int64_t planes = 3, outInner = 17, valuesInner = 400, n = 300;
  const std::vector<int64_t> destination = indices(n, outInner, g), rows = indices(n, 40, g);
  const std::vector<float> values = testing::wideFloats(planes * valuesInner, g),
                           weights = testing::wideFloats(n, g);
  for (int variant = 0; variant < 4; ++variant) {  // rows and weights, either, neither
    const bool gathered = variant % 2 == 0, weighted = variant < 2;
    std::vector<float> expected(planes * outInner, 0.0f);
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t s = 0; s < n; ++s) {
        const float v = values[p * valuesInner + (gathered ? rows[s] : s)];
        float& out = expected[p * outInner + destination[s]];
        out = weighted ? out + weights[s] * v : out + v;
      }
    }
    for (int threads : {1, 2}) {
      std::vector<float> out(planes * outInner, 3.0f);
      ASSERT_TRUE(weightedScatter(out.data(), planes, outInner, DataType::kFloat32,
                                  destination.data(), n, values.data(), valuesInner,
                                  gathered ? rows.data() : nullptr,
                                  weighted ? weights.data() : nullptr, threads)
                      .isOk());
      EXPECT_TRUE(sameBits(out, expected)) << "variant " << variant << ", threads " << threads;
    }
  }
  // Many planes: threads take whole planes, with the bits of one thread; destinations in half
  // of a larger output leave the rest +0 over a NaN fill.
  {
    const int64_t bigPlanes = 16, wideOut = 64, bigN = 40000;
    const std::vector<int64_t> half = indices(bigN, wideOut / 2, g), from = indices(bigN, 50, g);
    const std::vector<float> big = testing::wideFloats(bigPlanes * 50, g);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 3}) {
      std::vector<float> out(bigPlanes * wideOut, NAN);
      ASSERT_TRUE(weightedScatter(out.data(), bigPlanes, wideOut, DataType::kFloat32, half.data(),
                                  bigN, big.data(), 50, from.data(), nullptr, threads)
                      .isOk());
      results.push_back(out);
    }
    EXPECT_TRUE(sameBits(results[0], results[1]));
    for (int64_t p = 0; p < bigPlanes; ++p) {
      for (int64_t d = wideOut / 2; d < wideOut; ++d) {
        EXPECT_TRUE(results[0][p * wideOut + d] == 0.0f &&
                    !std::signbit(results[0][p * wideOut + d]));
      }
    }
  }
  // float64 takes double weights.
  std::vector<double> wide(planes * valuesInner), w(n), expected(planes * outInner, 0.0);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = values[i] * 1.000000119;
  for (int64_t s = 0; s < n; ++s) w[s] = weights[s] / 3.0;
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t s = 0; s < n; ++s) {
      double& out = expected[p * outInner + destination[s]];
      out = out + w[s] * wide[p * valuesInner + rows[s]];
    }
  }
  std::vector<double> out(planes * outInner);
  ASSERT_TRUE(weightedScatter(out.data(), planes, outInner, DataType::kFloat64, destination.data(),
                              n, wide.data(), valuesInner, rows.data(), w.data(), 1)
                  .isOk());
  EXPECT_EQ(std::memcmp(out.data(), expected.data(), out.size() * sizeof(double)), 0);
}

TEST(WeightedScatter, BadInputIsNamedAndTheOutputIsUntouched) {
  std::vector<int64_t> destination{0, 4, 2, 5}, rows{0, 1, 9, 2};
  const std::vector<float> values(20, 1.0f);
  std::vector<float> out(10, 7.0f);
  auto call = [&](const int64_t* d, const int64_t* r, int64_t valuesInner, DataType t) {
    return weightedScatter(out.data(), 2, 5, t, d, 4, values.data(), valuesInner, r, nullptr, 1)
        .message();
  };
  EXPECT_EQ(call(destination.data(), nullptr, 10, DataType::kFloat32),
            "weighted_scatter: destination[3] = 5 is out of range [0, 5)");
  destination[3] = 1;
  EXPECT_EQ(call(destination.data(), rows.data(), 9, DataType::kFloat32),
            "weighted_scatter: rows[2] = 9 is out of range [0, 9)");
  EXPECT_EQ(call(destination.data(), nullptr, 3, DataType::kFloat32),
            "weighted_scatter: 4 sources read in place from planes of 3 values");
  EXPECT_EQ(call(destination.data(), nullptr, 10, DataType::kInt32),
            "weighted_scatter: dtype int32; floating point only");
  EXPECT_EQ(call(nullptr, nullptr, 10, DataType::kFloat32),
            "weighted_scatter: destination is null");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == 7.0f; }));
}

TEST(ScatterNaN, EveryWrittenNaNIsTheCanonicalOneAndUntouchedRowsKeepTheirBits) {
  // inf + -inf is a NaN whose bits depend on the processor (x86: 0xffc00000; a GPU: 0x7fffffff);
  // every op of the family writes the dtype's canonical quiet NaN instead.
  const float inf = INFINITY;
  const uint32_t canonical = 0x7fc00000u, odd = 0x7fa12345u;  // odd: a NaN with a payload
  auto bitsOf = [](float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
  };
  float oddNaN;
  std::memcpy(&oddNaN, &odd, 4);
  {  // scatter_add 1-D (the in-place fast path), an untouched NaN row kept as it is
    std::vector<float> self{0.0f, oddNaN, 1.0f};
    const std::vector<float> src{inf, -inf, 2.0f};
    const std::vector<int64_t> index{0, 0, 2};
    ASSERT_TRUE(
        scatterAdd(self.data(), {3}, DataType::kFloat32, 0, index.data(), {3}, src.data(), {3}, 1)
            .isOk());
    EXPECT_EQ(bitsOf(self[0]), canonical);
    EXPECT_EQ(bitsOf(self[1]), odd);
    EXPECT_EQ(self[2], 3.0f);
  }
  {  // index_add with alpha (the weighted in-place path)
    std::vector<float> self{0.0f, oddNaN};
    const std::vector<float> src{inf, -inf};
    const std::vector<int64_t> index{0, 0};
    ASSERT_TRUE(
        indexAdd(self.data(), {2}, DataType::kFloat32, 0, index.data(), 2, src.data(), {2}, 0.5, 1)
            .isOk());
    EXPECT_EQ(bitsOf(self[0]), canonical);
    EXPECT_EQ(bitsOf(self[1]), odd);
  }
  {  // weighted_scatter
    const std::vector<float> values{inf, -inf, 1.0f};
    const std::vector<int64_t> destination{0, 0, 1};
    std::vector<float> out(2);
    ASSERT_TRUE(weightedScatter(out.data(), 1, 2, DataType::kFloat32, destination.data(), 3,
                                values.data(), 3, nullptr, nullptr, 1)
                    .isOk());
    EXPECT_EQ(bitsOf(out[0]), canonical);
    EXPECT_EQ(out[1], 1.0f);
  }
  {  // float64 segment mean
    const std::vector<double> data{INFINITY, -INFINITY};
    const std::vector<int64_t> ids{0, 0};
    std::vector<double> out(1);
    ASSERT_TRUE(unsortedSegmentReduce(out.data(), 1, DataType::kFloat64, data.data(), {2},
                                      ids.data(), 1, true, 1)
                    .isOk());
    uint64_t b;
    std::memcpy(&b, out.data(), 8);
    EXPECT_EQ(b, 0x7ff8000000000000ull);
  }
}

TEST(ScatterChecks, ShapesAndIndicesAreNamedAndTheOutputIsUntouched) {
  std::vector<float> self(12, 1.0f), src(12, 2.0f);
  const std::vector<int64_t> idx{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
  Status s = scatterAdd(self.data(), {3, 4}, DataType::kFloat32, 0, idx.data(), {3, 4}, src.data(),
                        {3, 4}, 1);
  EXPECT_NE(s.message().find("index value 3 at position 3 is out of range [0, 3) of dim 0"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(self, std::vector<float>(12, 1.0f));
  s = scatterAdd(self.data(), {3, 4}, DataType::kFloat32, 2, idx.data(), {3, 4}, src.data(), {3, 4},
                 1);
  EXPECT_NE(s.message().find("dim 2 is out of range"), std::string::npos) << s.message();
  s = scatterAdd(self.data(), {3, 4}, DataType::kFloat32, 0, idx.data(), {3, 5}, src.data(), {3, 4},
                 1);
  EXPECT_NE(s.message().find("is larger than src"), std::string::npos) << s.message();
  s = indexAdd(self.data(), {3, 4}, DataType::kFloat32, 0, idx.data(), 2, src.data(), {3, 4}, 1.0,
               1);
  EXPECT_NE(s.message().find("index_add: source [3, 4] must be self [3, 4]"), std::string::npos)
      << s.message();
  EXPECT_EQ(self, std::vector<float>(12, 1.0f));
}

}  // namespace
}  // namespace detcoll::kernels::ops
