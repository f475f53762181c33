// kernels/ops/resample.h: the bilinear backward against PyTorch's scatter loop (for each output
// pixel in turn, its four weighted terms added into a zeroed buffer), with the axis weights
// computed here from the contract; max pooling's forward against the plain window scan and its
// backward against the scatter gradInput[index] += gradOutput in output order. float32 and
// float64, random wide-range values, many ties; the same bits for 1, 2 and 7 threads; output sizes
// worked out by hand from PyTorch's formula; the argument and index checks.

#include "kernels/ops/resample.h"
#include "tests/support/serial_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/support/reference.h"

namespace detcoll::kernels::ops {
namespace {

template <typename T>
constexpr DataType typeOf() {
  return sizeof(T) == 4 ? DataType::kFloat32 : DataType::kFloat64;
}

// Wide-range, non-integer values (tests/support), seeded from g.
template <typename T>
std::vector<T> wide(size_t n, std::mt19937_64& g) {
  const std::vector<uint8_t> bytes = testing::randomBuffer(typeOf<T>(), n, g());
  std::vector<T> v(n);
  std::memcpy(v.data(), bytes.data(), n * sizeof(T));
  return v;
}

template <typename T>
bool sameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename T>
long firstDifference(const std::vector<T>& a, const std::vector<T>& b) {
  return testing::firstDifference(a.data(), b.data(), a.size(), typeOf<T>());
}

bool mentions(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

// ---- Bilinear --------------------------------------------------------------------------------

// One axis per the contract: the scale in A, the source position in double, l1 rounded once from
// double to A, l0 = 1 - l1 in A.
template <typename A>
struct Axis {
  std::vector<int64_t> i0, i1;
  std::vector<A> l0, l1;
};

template <typename A>
Axis<A> axis(int64_t in, int64_t out, bool alignCorners, double scaleFactor) {
  A scale;
  if (alignCorners) {
    scale = out > 1 ? A(in - 1) / A(out - 1) : A(0);
  } else if (scaleFactor > 0) {
    scale = A(1.0 / scaleFactor);
  } else {
    scale = A(in) / A(out);
  }
  Axis<A> a;
  for (int64_t o = 0; o < out; ++o) {
    if (in == out) {
      a.i0.push_back(o);
      a.i1.push_back(o);
      a.l0.push_back(A(1));
      a.l1.push_back(A(0));
      continue;
    }
    const double s = scale;
    double r = alignCorners ? s * double(o) : s * (double(o) + 0.5) - 0.5;
    if (r < 0) r = 0;
    const int64_t first = std::min<int64_t>(static_cast<int64_t>(std::floor(r)), in - 1);
    const A l1 = A(std::min(std::max(r - double(first), 0.0), 1.0));
    a.i0.push_back(first);
    a.i1.push_back(first < in - 1 ? first + 1 : first);
    a.l1.push_back(l1);
    a.l0.push_back(A(1) - l1);
  }
  return a;
}

// PyTorch's CPU loop: for each plane, oh, ow: the terms i00, i01, i10, i11 in that order, each
// (lh * lw) * g, into a zeroed buffer.
template <typename T>
std::vector<T> scatterBilinear(const std::vector<T>& grad, const Bilinear& s) {
  const Axis<T> h = axis<T>(s.inHeight, s.outHeight, s.alignCorners, s.scaleHeight);
  const Axis<T> w = axis<T>(s.inWidth, s.outWidth, s.alignCorners, s.scaleWidth);
  std::vector<T> out(s.planes * s.inHeight * s.inWidth, T(0));
  for (int64_t p = 0; p < s.planes; ++p) {
    T* in = out.data() + p * s.inHeight * s.inWidth;
    for (int64_t oh = 0; oh < s.outHeight; ++oh) {
      for (int64_t ow = 0; ow < s.outWidth; ++ow) {
        const T g = grad[(p * s.outHeight + oh) * s.outWidth + ow];
        T& i00 = in[h.i0[oh] * s.inWidth + w.i0[ow]];
        i00 = i00 + (h.l0[oh] * w.l0[ow]) * g;
        T& i01 = in[h.i0[oh] * s.inWidth + w.i1[ow]];
        i01 = i01 + (h.l0[oh] * w.l1[ow]) * g;
        T& i10 = in[h.i1[oh] * s.inWidth + w.i0[ow]];
        i10 = i10 + (h.l1[oh] * w.l0[ow]) * g;
        T& i11 = in[h.i1[oh] * s.inWidth + w.i1[ow]];
        i11 = i11 + (h.l1[oh] * w.l1[ow]) * g;
      }
    }
  }
  return out;
}

std::string describe(const Bilinear& s) {
  return std::to_string(s.planes) + " x " + std::to_string(s.inHeight) + " x " +
         std::to_string(s.inWidth) + " <- " + std::to_string(s.outHeight) + " x " +
         std::to_string(s.outWidth) + (s.alignCorners ? " align" : "") + " scales " +
         std::to_string(s.scaleHeight) + ", " + std::to_string(s.scaleWidth);
}

template <typename T>
void checkBilinear(const Bilinear& s, std::mt19937_64& g, const std::vector<int>& threads) {
  const std::vector<T> grad = wide<T>(s.planes * s.outHeight * s.outWidth, g);
  const std::vector<T> expected = scatterBilinear(grad, s);
  for (int t : threads) {
    std::vector<T> out(expected.size(), T(-7));
    const Status st = bilinear2dBackward(out.data(), grad.data(), typeOf<T>(), s, t);
    ASSERT_TRUE(st.isOk()) << st.message();
    EXPECT_TRUE(sameBits(out, expected)) << describe(s) << " threads " << t << " first difference "
                                         << firstDifference(out, expected);
  }
}

template <typename T>
class OpsResampleBilinear : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(OpsResampleBilinear, FloatTypes);

TYPED_TEST(OpsResampleBilinear, MatchesPyTorchsLoopForManySizes) {
  using T = TypeParam;
  std::mt19937_64 g(31);
  // Up, down, equal (an identity axis), 1 on either side.
  const int64_t sizes[] = {1, 2, 3, 5, 8, 13, 21};
  int cases = 0;
  for (int64_t inH : sizes)
    for (int64_t outH : sizes)
      for (bool align : {false, true}) {
        // The width axis runs through another pairing so that the two axes differ.
        const int64_t inW = sizes[(cases + 3) % 7], outW = sizes[(cases * 5 + 1) % 7];
        Bilinear s;
        s.planes = 3;
        s.inHeight = inH;
        s.inWidth = inW;
        s.outHeight = outH;
        s.outWidth = outW;
        s.alignCorners = align;
        checkBilinear<T>(s, g, {1});
        ++cases;
      }
  EXPECT_EQ(cases, 98);
}

TYPED_TEST(OpsResampleBilinear, MatchesPyTorchsLoopForGivenScaleFactors) {
  using T = TypeParam;
  std::mt19937_64 g(32);
  // (input, factor): the output is floor(input * factor), as interpolate makes it.
  const struct {
    int64_t in;
    double factor;
  } axes[] = {{7, 2.0}, {10, 0.5}, {7, 1.7}, {13, 0.3}, {5, 3.0}, {9, 1.3}, {6, 0.75}, {4, 1.0}};
  for (const auto& a : axes)
    for (const auto& b : axes)
      for (bool align : {false, true}) {
        Bilinear s;
        s.planes = 2;
        s.inHeight = a.in;
        s.inWidth = b.in;
        s.outHeight = static_cast<int64_t>(std::floor(a.in * a.factor));
        s.outWidth = static_cast<int64_t>(std::floor(b.in * b.factor));
        s.alignCorners = align;
        s.scaleHeight = a.factor;
        s.scaleWidth = b.factor;
        checkBilinear<T>(s, g, {1});
      }
  // Factors that send source positions past the input: clamped to the last pixel.
  Bilinear s;
  s.planes = 2;
  s.inHeight = 10;
  s.inWidth = 3;
  s.outHeight = 5;
  s.outWidth = 12;
  s.scaleHeight = 0.1;
  s.scaleWidth = 1.0;
  checkBilinear<T>(s, g, {1, 2});
}

TYPED_TEST(OpsResampleBilinear, AGivenFactorIsNotTheSizeRatio) {
  // 7 -> 11 at factor 1.7: 1 / 1.7 is not 7 / 11, so the weights differ (the tests above would
  // not notice a factor that is ignored otherwise).
  using T = TypeParam;
  std::mt19937_64 g(33);
  Bilinear s;
  s.planes = 2;
  s.inHeight = s.inWidth = 7;
  s.outHeight = s.outWidth = 11;
  const std::vector<T> grad = wide<T>(2 * 11 * 11, g);
  std::vector<T> bySizes(2 * 7 * 7), byFactors(2 * 7 * 7);
  ASSERT_TRUE(bilinear2dBackward(bySizes.data(), grad.data(), typeOf<T>(), s, 1).isOk());
  s.scaleHeight = s.scaleWidth = 1.7;
  ASSERT_TRUE(bilinear2dBackward(byFactors.data(), grad.data(), typeOf<T>(), s, 1).isOk());
  EXPECT_FALSE(sameBits(bySizes, byFactors));
  EXPECT_TRUE(sameBits(byFactors, scatterBilinear(grad, s)));
  // align_corners ignores the factors.
  s.alignCorners = true;
  ASSERT_TRUE(bilinear2dBackward(byFactors.data(), grad.data(), typeOf<T>(), s, 1).isOk());
  s.scaleHeight = s.scaleWidth = 0;
  ASSERT_TRUE(bilinear2dBackward(bySizes.data(), grad.data(), typeOf<T>(), s, 1).isOk());
  EXPECT_TRUE(sameBits(bySizes, byFactors));
}

TYPED_TEST(OpsResampleBilinear, ThreadCountsGiveTheSameBits) {
  // 8 planes of 260 x 261 outputs (150 x 140 inputs): work for 7 threads whether the host splits
  // planes (64K output pixels or more each) or pixels (168000 of them).
  using T = TypeParam;
  std::mt19937_64 g(34);
  for (bool align : {false, true}) {
    Bilinear s;
    s.planes = 8;
    s.inHeight = 150;
    s.inWidth = 140;
    s.outHeight = 260;
    s.outWidth = 261;
    s.alignCorners = align;
    checkBilinear<T>(s, g, {1, 2, 7, 0});
  }
}

TYPED_TEST(OpsResampleBilinear, OrderMatters) {
  // The data the tests use tell orders apart: the same terms summed output pixel by output pixel
  // in reverse give other bits for some input pixel.
  using T = TypeParam;
  std::mt19937_64 g(35);
  Bilinear s;
  s.planes = 4;
  s.inHeight = 5;
  s.inWidth = 4;
  s.outHeight = 40;
  s.outWidth = 33;
  const std::vector<T> grad = wide<T>(4 * 40 * 33, g);
  const Axis<T> h = axis<T>(5, 40, false, 0), w = axis<T>(4, 33, false, 0);
  std::vector<T> backwards(4 * 5 * 4, T(0));
  for (int64_t p = 0; p < 4; ++p)
    for (int64_t oh = 39; oh >= 0; --oh)
      for (int64_t ow = 32; ow >= 0; --ow) {
        const T v = grad[(p * 40 + oh) * 33 + ow];
        T* in = backwards.data() + p * 20;
        in[h.i0[oh] * 4 + w.i0[ow]] += (h.l0[oh] * w.l0[ow]) * v;
        in[h.i0[oh] * 4 + w.i1[ow]] += (h.l0[oh] * w.l1[ow]) * v;
        in[h.i1[oh] * 4 + w.i0[ow]] += (h.l1[oh] * w.l0[ow]) * v;
        in[h.i1[oh] * 4 + w.i1[ow]] += (h.l1[oh] * w.l1[ow]) * v;
      }
  std::vector<T> out(4 * 5 * 4);
  ASSERT_TRUE(bilinear2dBackward(out.data(), grad.data(), typeOf<T>(), s, 2).isOk());
  EXPECT_TRUE(sameBits(out, scatterBilinear(grad, s)));
  EXPECT_FALSE(sameBits(out, backwards));
}

// ---- Max pooling -------------------------------------------------------------------------------

// Output size by PyTorch's formula, written out again.
int64_t outputSize(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  const int64_t numerator = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  int64_t out = (numerator >= 0 ? numerator / s : -((-numerator + s - 1) / s)) + 1;
  if (ceil && (out - 1) * s >= in + p) --out;
  return out;
}

// Small integers (ties everywhere) with NaNs of distinct payloads and -infs; plane 0 all -inf.
template <typename T>
std::vector<T> tied(int64_t planes, int64_t h, int64_t w, std::mt19937_64& g, int levels,
                    bool specials) {
  std::vector<T> x(planes * h * w);
  std::uniform_int_distribution<int> value(0, levels - 1), special(0, 24);
  uint64_t payload = 1;
  for (T& v : x) {
    v = T(value(g));
    if (!specials) continue;
    const int k = special(g);
    if (k == 0) {
      v = -std::numeric_limits<T>::infinity();
    } else if (k == 1) {
      v = std::numeric_limits<T>::quiet_NaN();
      if constexpr (sizeof(T) == 4) {
        uint32_t b;
        std::memcpy(&b, &v, 4);
        b |= static_cast<uint32_t>(payload++ & 0x3FFFFF);
        std::memcpy(&v, &b, 4);
      } else {
        uint64_t b;
        std::memcpy(&b, &v, 8);
        b |= payload++ & 0x7FFFFFFFFFFFFull;
        std::memcpy(&v, &b, 8);
      }
    }
  }
  if (specials) std::fill(x.begin(), x.begin() + h * w, -std::numeric_limits<T>::infinity());
  return x;
}

// The window scan: taps in row-major order inside the input; the first tap to start with, then a
// tap larger than the best so far, or any NaN, takes over.
template <typename T>
void scanMaxPool(const std::vector<T>& x, const Pool2d& p, int64_t outH, int64_t outW,
                 std::vector<T>* out, std::vector<int64_t>* indices) {
  out->assign(p.planes * outH * outW, T(0));
  indices->assign(p.planes * outH * outW, -1);
  for (int64_t plane = 0; plane < p.planes; ++plane)
    for (int64_t oh = 0; oh < outH; ++oh)
      for (int64_t ow = 0; ow < outW; ++ow) {
        int64_t best = -1;
        T bestValue = T(0);
        for (int64_t kh = 0; kh < p.kernelHeight; ++kh)
          for (int64_t kw = 0; kw < p.kernelWidth; ++kw) {
            const int64_t y = oh * p.strideHeight - p.padHeight + kh * p.dilationHeight;
            const int64_t c = ow * p.strideWidth - p.padWidth + kw * p.dilationWidth;
            if (y < 0 || y >= p.inHeight || c < 0 || c >= p.inWidth) continue;
            const T v = x[(plane * p.inHeight + y) * p.inWidth + c];
            if (best < 0 || v > bestValue || std::isnan(v)) {
              best = y * p.inWidth + c;
              bestValue = v;
            }
          }
        const int64_t o = (plane * outH + oh) * outW + ow;
        (*out)[o] = bestValue;
        (*indices)[o] = best;
      }
}

// gradInput[index[o]] += gradOutput[o], o in row-major order, into a zeroed buffer.
template <typename T>
std::vector<T> scatterMaxPool(const std::vector<T>& grad, const std::vector<int64_t>& indices,
                              const Pool2d& p, int64_t outH, int64_t outW) {
  std::vector<T> out(p.planes * p.inHeight * p.inWidth, T(0));
  for (int64_t plane = 0; plane < p.planes; ++plane)
    for (int64_t o = 0; o < outH * outW; ++o) {
      T& target = out[plane * p.inHeight * p.inWidth + indices[plane * outH * outW + o]];
      target = target + grad[plane * outH * outW + o];
    }
  return out;
}

// The largest number of outputs of one plane naming the same input.
int64_t mostHits(const std::vector<int64_t>& indices, const Pool2d& p, int64_t outPlane) {
  int64_t most = 0;
  for (int64_t plane = 0; plane < p.planes; ++plane) {
    std::vector<int64_t> count(p.inHeight * p.inWidth, 0);
    for (int64_t o = 0; o < outPlane; ++o) {
      most = std::max(most, ++count[indices[plane * outPlane + o]]);
    }
  }
  return most;
}

std::string describe(const Pool2d& p) {
  return std::to_string(p.planes) + " x " + std::to_string(p.inHeight) + " x " +
         std::to_string(p.inWidth) + " kernel " + std::to_string(p.kernelHeight) + "x" +
         std::to_string(p.kernelWidth) + " stride " + std::to_string(p.strideHeight) + "x" +
         std::to_string(p.strideWidth) + " pad " + std::to_string(p.padHeight) + "x" +
         std::to_string(p.padWidth) + " dilation " + std::to_string(p.dilationHeight) + "x" +
         std::to_string(p.dilationWidth) + (p.ceilMode ? " ceil" : "");
}

// Every combination over a grid of shapes and parameters that PyTorch accepts.
std::vector<Pool2d> poolGrid() {
  std::vector<Pool2d> all;
  for (int64_t h : {5, 8, 9})
    for (int64_t k : {1, 2, 3})
      for (int64_t s : {1, 2, 3})
        for (int64_t pad : {0, 1})
          for (int64_t d : {1, 2})
            for (bool ceil : {false, true}) {
              if (pad > k / 2) continue;
              Pool2d p;
              p.planes = 3;
              p.inHeight = h;
              p.inWidth = h + 2;
              p.kernelHeight = k;
              p.kernelWidth = k == 3 ? 2 : k + 1;  // a different width kernel
              p.strideHeight = s;
              p.strideWidth = s == 3 ? 1 : s + 1;
              p.padHeight = pad;
              p.padWidth = std::min(pad, p.kernelWidth / 2);
              p.dilationHeight = d;
              p.dilationWidth = 3 - d;
              p.ceilMode = ceil;
              all.push_back(p);
            }
  return all;
}

template <typename T>
class OpsResampleMaxPool : public ::testing::Test {};
TYPED_TEST_SUITE(OpsResampleMaxPool, FloatTypes);

TYPED_TEST(OpsResampleMaxPool, ForwardMatchesTheWindowScan) {
  using T = TypeParam;
  std::mt19937_64 g(41);
  int checked = 0;
  bool sawNaN = false, sawMinusInfinity = false;
  for (const Pool2d& p : poolGrid()) {
    int64_t outH = 0, outW = 0;
    const Status size = pool2dOutputSize(p, &outH, &outW);
    const int64_t wantH = outputSize(p.inHeight, p.kernelHeight, p.strideHeight, p.padHeight,
                                     p.dilationHeight, p.ceilMode);
    const int64_t wantW = outputSize(p.inWidth, p.kernelWidth, p.strideWidth, p.padWidth,
                                     p.dilationWidth, p.ceilMode);
    if (wantH < 1 || wantW < 1) {
      EXPECT_FALSE(size.isOk()) << describe(p);
      continue;
    }
    ASSERT_TRUE(size.isOk()) << describe(p) << ": " << size.message();
    ASSERT_EQ(outH, wantH) << describe(p);
    ASSERT_EQ(outW, wantW) << describe(p);
    const std::vector<T> x = tied<T>(p.planes, p.inHeight, p.inWidth, g, 3, true);
    std::vector<T> expected;
    std::vector<int64_t> expectedIndices;
    scanMaxPool(x, p, outH, outW, &expected, &expectedIndices);
    ASSERT_EQ(std::count(expectedIndices.begin(), expectedIndices.end(), int64_t{-1}), 0)
        << describe(p) << ": a window wholly in the padding (see the disabled test below)";
    for (T v : expected) {
      sawNaN |= std::isnan(v);
      sawMinusInfinity |= std::isinf(v) && v < 0;
    }
    for (int threads : {1, 2}) {
      std::vector<T> out(expected.size(), T(5));
      std::vector<int64_t> indices(expected.size(), -3);
      const Status st = maxPool2d(out.data(), indices.data(), x.data(), typeOf<T>(), p, threads);
      ASSERT_TRUE(st.isOk()) << describe(p) << ": " << st.message();
      EXPECT_EQ(indices, expectedIndices) << describe(p);
      EXPECT_TRUE(sameBits(out, expected))
          << describe(p) << " first difference " << firstDifference(out, expected);
    }
    ++checked;
  }
  EXPECT_GT(checked, 150);
  EXPECT_TRUE(sawNaN);
  EXPECT_TRUE(sawMinusInfinity);
}

TYPED_TEST(OpsResampleMaxPool, BackwardMatchesTheScatter) {
  using T = TypeParam;
  std::mt19937_64 g(42);
  int64_t most = 0;
  for (const Pool2d& p : poolGrid()) {
    int64_t outH = 0, outW = 0;
    if (!pool2dOutputSize(p, &outH, &outW).isOk()) continue;
    // Two values only: ties in nearly every window, so overlapping windows share indices.
    const std::vector<T> x = tied<T>(p.planes, p.inHeight, p.inWidth, g, 2, false);
    std::vector<T> out(p.planes * outH * outW);
    std::vector<int64_t> indices(out.size());
    ASSERT_TRUE(maxPool2d(out.data(), indices.data(), x.data(), typeOf<T>(), p, 1).isOk());
    const std::vector<T> grad = wide<T>(out.size(), g);
    const std::vector<T> expected = scatterMaxPool(grad, indices, p, outH, outW);
    most = std::max(most, mostHits(indices, p, outH * outW));
    for (int threads : {1, 2}) {
      std::vector<T> gradInput(expected.size(), T(9));
      const Status st =
          maxPool2dBackward(gradInput.data(), grad.data(), indices.data(), typeOf<T>(), p, threads);
      ASSERT_TRUE(st.isOk()) << describe(p) << ": " << st.message();
      EXPECT_TRUE(sameBits(gradInput, expected))
          << describe(p) << " first difference " << firstDifference(gradInput, expected);
    }
  }
  EXPECT_GE(most, 4);
}

// Indices need not be maxima: any tap of each window, drawn at random, many outputs on one input.
TYPED_TEST(OpsResampleMaxPool, BackwardTakesAnyTapOfEachWindow) {
  using T = TypeParam;
  std::mt19937_64 g(43);
  for (const Pool2d& p : poolGrid()) {
    int64_t outH = 0, outW = 0;
    if (!pool2dOutputSize(p, &outH, &outW).isOk()) continue;
    std::vector<int64_t> indices;
    for (int64_t plane = 0; plane < p.planes; ++plane)
      for (int64_t oh = 0; oh < outH; ++oh)
        for (int64_t ow = 0; ow < outW; ++ow) {
          std::vector<int64_t> taps;
          for (int64_t kh = 0; kh < p.kernelHeight; ++kh)
            for (int64_t kw = 0; kw < p.kernelWidth; ++kw) {
              const int64_t y = oh * p.strideHeight - p.padHeight + kh * p.dilationHeight;
              const int64_t c = ow * p.strideWidth - p.padWidth + kw * p.dilationWidth;
              if (y >= 0 && y < p.inHeight && c >= 0 && c < p.inWidth) {
                taps.push_back(y * p.inWidth + c);
              }
            }
          ASSERT_FALSE(taps.empty()) << describe(p);
          indices.push_back(taps[std::uniform_int_distribution<size_t>(0, taps.size() - 1)(g)]);
        }
    const std::vector<T> grad = wide<T>(indices.size(), g);
    std::vector<T> gradInput(p.planes * p.inHeight * p.inWidth);
    const Status st =
        maxPool2dBackward(gradInput.data(), grad.data(), indices.data(), typeOf<T>(), p, 2);
    ASSERT_TRUE(st.isOk()) << describe(p) << ": " << st.message();
    EXPECT_TRUE(sameBits(gradInput, scatterMaxPool(grad, indices, p, outH, outW))) << describe(p);
  }
}

TYPED_TEST(OpsResampleMaxPool, ThreadCountsGiveTheSameBits) {
  // 8 planes of 260 x 260, overlapping 3 x 3 windows at stride 1: work for 7 threads whether the
  // host splits planes (64K outputs or more each) or elements.
  using T = TypeParam;
  std::mt19937_64 g(44);
  Pool2d p;
  p.planes = 8;
  p.inHeight = p.inWidth = 260;
  p.kernelHeight = p.kernelWidth = 3;
  p.padHeight = p.padWidth = 1;
  int64_t outH = 0, outW = 0;
  ASSERT_TRUE(pool2dOutputSize(p, &outH, &outW).isOk());
  ASSERT_EQ(outH, 260);
  ASSERT_EQ(outW, 260);
  const std::vector<T> x = tied<T>(p.planes, p.inHeight, p.inWidth, g, 2, true);
  std::vector<T> expected;
  std::vector<int64_t> expectedIndices;
  scanMaxPool(x, p, outH, outW, &expected, &expectedIndices);
  const std::vector<T> grad = wide<T>(expected.size(), g);
  const std::vector<T> expectedGrad = scatterMaxPool(grad, expectedIndices, p, outH, outW);
  EXPECT_GE(mostHits(expectedIndices, p, outH * outW), 5);
  for (int threads : {1, 2, 7, 0}) {
    std::vector<T> out(expected.size());
    std::vector<int64_t> indices(expected.size());
    ASSERT_TRUE(maxPool2d(out.data(), indices.data(), x.data(), typeOf<T>(), p, threads).isOk());
    EXPECT_TRUE(sameBits(out, expected)) << "threads " << threads;
    EXPECT_EQ(indices, expectedIndices) << "threads " << threads;
    std::vector<T> gradInput(x.size());
    ASSERT_TRUE(
        maxPool2dBackward(gradInput.data(), grad.data(), indices.data(), typeOf<T>(), p, threads)
            .isOk());
    EXPECT_TRUE(sameBits(gradInput, expectedGrad)) << "threads " << threads;
  }
}

// A window wholly in the padding, possible when the dilation exceeds the input: 2 wide, padding 1,
// kernel 2, dilation 3 gives taps -1 and 2, neither inside. PyTorch reports -inf there with index
// 2 * 2 + 2 = 6 (its first tap stepped past the padding, outside the plane); maxPool2d must not
// read the input there (the rest of this buffer, all 5s, would show it).
TEST(OpsResampleMaxPoolEdge, AWindowWhollyInThePaddingGivesMinusInfinity) {
  Pool2d p;
  p.planes = 1;
  p.inHeight = p.inWidth = 2;
  p.kernelHeight = p.kernelWidth = 2;
  p.strideHeight = p.strideWidth = 2;
  p.padHeight = p.padWidth = 1;
  p.dilationHeight = p.dilationWidth = 3;
  int64_t outH = 0, outW = 0;
  ASSERT_TRUE(pool2dOutputSize(p, &outH, &outW).isOk());
  ASSERT_EQ(outH, 1);
  ASSERT_EQ(outW, 1);
  const std::vector<float> x = {1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5};
  float out = 0;
  int64_t index = 0;
  ASSERT_TRUE(maxPool2d(&out, &index, x.data(), DataType::kFloat32, p, 1).isOk());
  EXPECT_EQ(index, 6);
  EXPECT_EQ(out, -std::numeric_limits<float>::infinity());
  // Its gradient goes nowhere; the index is accepted, and the serial run (the GPU's gather) agrees.
  const float grad = 1.5f;
  std::vector<float> back(4, 7.0f), serialBack(4, 7.0f);
  ASSERT_TRUE(maxPool2dBackward(back.data(), &grad, &index, DataType::kFloat32, p, 1).isOk());
  ASSERT_TRUE(
      testing::serial::maxPool2dBackward(serialBack.data(), &grad, &index, DataType::kFloat32, p)
          .isOk());
  EXPECT_EQ(back, std::vector<float>(4, 0.0f));
  EXPECT_EQ(serialBack, back);
  float serialOut = 0;
  int64_t serialIndex = 0;
  ASSERT_TRUE(
      testing::serial::maxPool2d(&serialOut, &serialIndex, x.data(), DataType::kFloat32, p).isOk());
  EXPECT_EQ(serialIndex, 6);
  EXPECT_EQ(serialOut, out);
}

// ---- Output sizes, by hand from PyTorch's formula ----------------------------------------------
//   out = floor((in + 2p - d (k - 1) - 1 + (ceil ? s - 1 : 0)) / s) + 1,
//   and with ceil, one less if the last window would start at or past in + p (in the padding).

Pool2d square(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d, bool ceil) {
  Pool2d p;
  p.planes = 2;
  p.inHeight = p.inWidth = in;
  p.kernelHeight = p.kernelWidth = k;
  p.strideHeight = p.strideWidth = s;
  p.padHeight = p.padWidth = pad;
  p.dilationHeight = p.dilationWidth = d;
  p.ceilMode = ceil;
  return p;
}

TEST(OpsResamplePoolSize, KnownCases) {
  const struct {
    int64_t in, k, s, p, d;
    bool ceil;
    int64_t out;
  } cases[] = {
      {10, 3, 1, 0, 1, false, 8},  // (10 - 2 - 1) / 1 + 1
      {10, 3, 2, 1, 1, false, 5},  // 9 / 2 + 1
      {10, 3, 2, 1, 1, true, 6},   // 10 / 2 + 1; the last window starts at 9 < 11
      {5, 2, 2, 1, 1, false, 3},   // 5 / 2 + 1
      {5, 2, 2, 1, 1, true, 3},    // 6 / 2 + 1 = 4, but window 3 would start at 6 = 5 + 1
      {8, 3, 3, 1, 1, true, 3},    // 9 / 3 + 1 = 4, but window 3 would start at 9 = 8 + 1
      {8, 3, 3, 1, 1, false, 3},   // 7 / 3 + 1
      {7, 2, 2, 0, 1, false, 3},   // 5 / 2 + 1
      {7, 2, 2, 0, 1, true, 4},    // 6 / 2 + 1; the last window starts at 6 < 7
      {9, 3, 1, 0, 2, false, 5},   // (9 - 4 - 1) / 1 + 1
      {9, 3, 2, 1, 2, true, 4},    // (9 + 2 - 4 - 1 + 1) / 2 + 1 = 7 / 2 + 1
      {1, 1, 3, 0, 1, true, 1},    // 2 / 3 + 1
      {4, 2, 3, 1, 1, true, 2},    // 6 / 3 + 1 = 3, but window 2 would start at 6 >= 5
      {6, 4, 2, 2, 1, true, 4},    // 7 / 2 + 1
      {2, 2, 1, 0, 1, false, 1},   // 0 / 1 + 1
  };
  for (const auto& c : cases) {
    int64_t h = -1, w = -1;
    const Status st = pool2dOutputSize(square(c.in, c.k, c.s, c.p, c.d, c.ceil), &h, &w);
    ASSERT_TRUE(st.isOk()) << st.message();
    EXPECT_EQ(h, c.out) << "in " << c.in << " k " << c.k << " s " << c.s << " p " << c.p << " d "
                        << c.d << (c.ceil ? " ceil" : "");
    EXPECT_EQ(w, c.out);
  }
  // The axes separately: rows 10, k 3, s 2, p 1 (5); columns 7, k 2, s 2, p 0 (3; 4 with ceil).
  Pool2d p = square(10, 3, 2, 1, 1, false);
  p.inWidth = 7;
  p.kernelWidth = 2;
  p.padWidth = 0;
  int64_t h = 0, w = 0;
  ASSERT_TRUE(pool2dOutputSize(p, &h, &w).isOk());
  EXPECT_EQ(h, 5);
  EXPECT_EQ(w, 3);
  p.ceilMode = true;
  ASSERT_TRUE(pool2dOutputSize(p, &h, &w).isOk());
  EXPECT_EQ(h, 6);
  EXPECT_EQ(w, 4);
}

// ---- Bad arguments -----------------------------------------------------------------------------

TEST(OpsResampleErrors, PoolParameters) {
  const struct {
    Pool2d pool;
    const char* what;
  } cases[] = {
      {square(6, 0, 1, 0, 1, false), "kernel size must be positive"},
      {square(6, 2, 0, 0, 1, false), "stride must be positive"},
      {square(6, 2, 1, 0, 0, false), "dilation must be positive"},
      {square(6, 3, 1, 2, 1, false), "half the kernel"},   // padding 2 > 3 / 2
      {square(6, 2, 1, -1, 1, false), "half the kernel"},  // negative padding
      {square(3, 3, 1, 0, 2, false), "too small"},         // (3 - 4 - 1) / 1 + 1 = -1
      {square(2, 3, 1, 0, 1, false), "too small"},         // (2 - 2 - 1) / 1 + 1 = 0
      {square(0, 1, 1, 0, 1, false), "non-empty plane"},
  };
  for (const auto& c : cases) {
    int64_t h = -5, w = -5;
    const Status st = pool2dOutputSize(c.pool, &h, &w);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_TRUE(mentions(st, c.what)) << st.message();
    EXPECT_EQ(h, -5);
    EXPECT_EQ(w, -5);
    // The pooling functions check the same and write nothing.
    std::vector<float> x(64, 1.0f), out(64, 3.0f);
    std::vector<int64_t> indices(64, 7);
    const Status f = maxPool2d(out.data(), indices.data(), x.data(), DataType::kFloat32, c.pool, 1);
    EXPECT_EQ(f.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(mentions(f, c.what)) << f.message();
    const Status b =
        maxPool2dBackward(out.data(), x.data(), indices.data(), DataType::kFloat32, c.pool, 1);
    EXPECT_EQ(b.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(mentions(b, c.what)) << b.message();
    EXPECT_EQ(out, std::vector<float>(64, 3.0f));
    EXPECT_EQ(indices, std::vector<int64_t>(64, 7));
  }
  // The padding message gives the numbers.
  Pool2d p = square(6, 3, 1, 1, 1, false);
  p.kernelWidth = 4;
  p.padWidth = 3;
  const Status st = pool2dOutputSize(p, nullptr, nullptr);
  EXPECT_TRUE(mentions(st, "padding (1, 3)")) << st.message();
  EXPECT_TRUE(mentions(st, "(3, 4)")) << st.message();
}

TEST(OpsResampleErrors, IntegerTypesAndNullTensors) {
  std::vector<int32_t> xi(64, 1), outi(64, 3);
  std::vector<int64_t> indices(64, 7);
  const Pool2d p = square(4, 2, 2, 0, 1, false);
  Status st = maxPool2d(outi.data(), indices.data(), xi.data(), DataType::kInt32, p, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(mentions(st, "floating point")) << st.message();
  st = maxPool2dBackward(outi.data(), xi.data(), indices.data(), DataType::kInt64, p, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(mentions(st, "floating point")) << st.message();
  Bilinear s;
  s.planes = 1;
  s.inHeight = s.inWidth = 2;
  s.outHeight = s.outWidth = 4;
  st = bilinear2dBackward(outi.data(), xi.data(), DataType::kInt32, s, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(mentions(st, "floating point")) << st.message();
  EXPECT_EQ(outi, std::vector<int32_t>(64, 3));
  EXPECT_EQ(indices, std::vector<int64_t>(64, 7));

  std::vector<float> x(64, 1.0f);
  st = maxPool2d(nullptr, indices.data(), x.data(), DataType::kFloat32, p, 1);
  EXPECT_TRUE(mentions(st, "null")) << st.message();
  st = maxPool2dBackward(x.data(), x.data(), nullptr, DataType::kFloat32, p, 1);
  EXPECT_TRUE(mentions(st, "null")) << st.message();
  st = bilinear2dBackward(x.data(), nullptr, DataType::kFloat32, s, 1);
  EXPECT_TRUE(mentions(st, "null")) << st.message();
}

TEST(OpsResampleErrors, BilinearSizes) {
  std::vector<float> grad(64, 1.0f), out(64, 3.0f);
  for (int field = 0; field < 5; ++field) {
    Bilinear s;
    s.planes = 2;
    s.inHeight = s.inWidth = 2;
    s.outHeight = s.outWidth = 3;
    int64_t* sizes[] = {&s.planes, &s.inHeight, &s.inWidth, &s.outHeight, &s.outWidth};
    *sizes[field] = field == 0 ? -1 : 0;  // no planes is fine, fewer is not; no pixels is not
    const Status st = bilinear2dBackward(out.data(), grad.data(), DataType::kFloat32, s, 1);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_TRUE(mentions(st, "sizes must be positive")) << st.message();
    EXPECT_EQ(out, std::vector<float>(64, 3.0f));
  }
  // No planes: nothing to do, null pointers allowed.
  Bilinear s;
  s.inHeight = s.inWidth = 2;
  s.outHeight = s.outWidth = 3;
  EXPECT_TRUE(bilinear2dBackward(nullptr, nullptr, DataType::kFloat32, s, 1).isOk());
}

TEST(OpsResampleErrors, AnIndexOutsideItsWindowIsNamedAndNothingIsWritten) {
  std::mt19937_64 g(51);
  Pool2d p = square(9, 3, 2, 1, 2, false);  // taps 2 apart, windows 2 apart, padding 1
  p.inWidth = 10;
  int64_t outH = 0, outW = 0;
  ASSERT_TRUE(pool2dOutputSize(p, &outH, &outW).isOk());
  const std::vector<float> x = tied<float>(p.planes, p.inHeight, p.inWidth, g, 3, false);
  std::vector<float> out(p.planes * outH * outW);
  std::vector<int64_t> indices(out.size());
  ASSERT_TRUE(maxPool2d(out.data(), indices.data(), x.data(), DataType::kFloat32, p, 1).isOk());
  const std::vector<float> grad = wide<float>(out.size(), g);
  std::vector<float> gradInput(x.size(), 11.0f);
  ASSERT_TRUE(
      maxPool2dBackward(gradInput.data(), grad.data(), indices.data(), DataType::kFloat32, p, 2)
          .isOk());

  // Output 7 of plane 1: its last tap inside the plane, (y, c), and places that are not taps.
  const int64_t o = 7, position = outH * outW + o;
  const int64_t oh = o / outW, ow = o % outW;
  int64_t y = -1, c = -1;
  for (int64_t k = 0; k < 3; ++k) {
    if (oh * 2 - 1 + 2 * k < p.inHeight) y = oh * 2 - 1 + 2 * k;
    if (ow * 2 - 1 + 2 * k < p.inWidth) c = ow * 2 - 1 + 2 * k;
  }
  ASSERT_GE(y, 0);
  ASSERT_GE(c, 0);
  const int64_t plane = p.inHeight * p.inWidth;
  for (int64_t bad : {int64_t{-1}, plane, plane + 1000, (y + 1) * p.inWidth + c,
                      y * p.inWidth + c - 1, (y + 2) * p.inWidth + c, y * p.inWidth + c + 2}) {
    std::vector<int64_t> corrupt = indices;
    corrupt[position] = bad;
    for (int threads : {1, 2}) {
      std::vector<float> target(x.size(), 11.0f);
      const Status st = maxPool2dBackward(target.data(), grad.data(), corrupt.data(),
                                          DataType::kFloat32, p, threads);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_TRUE(mentions(st, "indices[" + std::to_string(position) +
                                   "] = " + std::to_string(bad) + " is not a position of output " +
                                   std::to_string(o) + "'s window"))
          << st.message();
      EXPECT_EQ(target, std::vector<float>(x.size(), 11.0f));
    }
  }
  // Several bad: the first in order is named, whatever the threads.
  std::vector<int64_t> corrupt = indices;
  corrupt[position] = -5;
  corrupt[3] = -7;
  corrupt.back() = plane;
  for (int threads : {1, 2, 7}) {
    const Status st = maxPool2dBackward(gradInput.data(), grad.data(), corrupt.data(),
                                        DataType::kFloat32, p, threads);
    EXPECT_TRUE(mentions(st, "indices[3] = -7")) << st.message();
  }
}

}  // namespace
}  // namespace detcoll::kernels::ops
