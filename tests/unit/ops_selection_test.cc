// kernels/ops/selection.h: kthvalue and median against a stable sort written here (std::
// stable_sort with NaN last and -0 equal to +0), in every dtype, with ties, signed zeros and NaNs;
// the serial run of the device formulation (bodies/selection.h: two radix sorts) against the CPU
// reference, bit for bit; and the words for a k out of range.

#include "kernels/ops/selection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/support/op_data.h"
#include "tests/support/serial_ops.h"

namespace detcoll::kernels::ops {
namespace {

using Bytes = std::vector<uint8_t>;

// Values with many ties, both zeros, infinities and NaNs, as doubles (rounded to the dtype later).
std::vector<double> awkward(int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  const double pool[] = {-0.0, 0.0, 1.5, -2.25, INFINITY, -INFINITY, NAN, 3.0, -7.0, 0.5};
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<double> v(n);
  for (double& x : v) x = pool[pick(g)];
  return v;
}

TEST(Selection, KthAndMedianFollowTheStableOrderInEveryDtype) {
  Selection s;
  s.outer = 3;
  s.length = 17;
  s.inner = 4;
  const std::vector<double> x = awkward(s.outer * s.length * s.inner, 161);
  for (DataType t : testing::kAllTypes) {
    const bool floating = isFloatingPoint(t);
    std::vector<double> values = x;
    if (!floating) {  // integers: no NaN or infinity
      for (double& v : values) v = std::isfinite(v) ? std::floor(v) : 11.0;
    }
    const Bytes input = testing::fromDoubles(values, t);
    for (bool median : {false, true}) {
      for (int64_t k : {int64_t{1}, int64_t{6}, int64_t{9}, s.length}) {
        Selection q = s;
        q.median = median;
        q.k = median ? (s.length + 1) / 2 : k;
        const int64_t slices = s.outer * s.inner;
        Bytes ref(slices * dataTypeSize(t), 0xab), serial(ref.size(), 0xcd);
        std::vector<int64_t> refIdx(slices, -5), serialIdx(slices, -6);
        ASSERT_TRUE(select(ref.data(), refIdx.data(), input.data(), t, q, 2).isOk());
        ASSERT_TRUE(
            testing::serial::select(serial.data(), serialIdx.data(), input.data(), t, q).isOk());
        const std::string what = dataTypeName(t) + (median ? " median" : " k " + std::to_string(k));
        EXPECT_EQ(testing::bitsDiffer(serial, ref, t, "serial", "reference"), "") << what;
        EXPECT_EQ(serialIdx, refIdx) << what;
        for (int64_t slice = 0; slice < slices; ++slice) {
          const int64_t o = slice / s.inner, r = slice % s.inner;
          auto at = [&](int64_t j) {
            return testing::elementAsDouble(input.data(), (o * s.length + j) * s.inner + r, t);
          };
          std::vector<int64_t> order(s.length);
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            const double va = at(a), vb = at(b);
            if (std::isnan(vb)) return !std::isnan(va);
            return va < vb;
          });
          int64_t expected = order[q.k - 1];
          if (median && std::isnan(at(order[s.length - 1]))) {
            expected = s.length;
            for (int64_t j = 0; j < s.length; ++j) {
              if (std::isnan(at(j))) expected = std::min(expected, j);
            }
          }
          EXPECT_EQ(refIdx[slice], expected) << what << " slice " << slice;
          const double got = testing::elementAsDouble(ref.data(), slice, t);
          EXPECT_TRUE(std::isnan(at(expected)) ? std::isnan(got) : got == at(expected))
              << what << " slice " << slice;
        }
      }
    }
  }
}

TEST(Selection, AKOutsideTheDimensionIsRefused) {
  Selection s;
  s.length = 4;
  s.k = 5;
  std::vector<float> v(4), out(1);
  int64_t index = 0;
  EXPECT_EQ(select(out.data(), &index, v.data(), DataType::kFloat32, s, 1).message(),
            "kthvalue: k = 5 is out of range for a dimension of 4 elements");
  EXPECT_EQ(testing::serial::select(out.data(), &index, v.data(), DataType::kFloat32, s).message(),
            "kthvalue: k = 5 is out of range for a dimension of 4 elements");
}

}  // namespace
}  // namespace detcoll::kernels::ops
