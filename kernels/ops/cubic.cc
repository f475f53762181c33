#include "kernels/ops/cubic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/ops/for_each_index.h"
#include "kernels/ops/op_checks.h"
#include "kernels/ops/taps.h"

namespace detcoll::kernels::ops {
namespace {

template <typename O>
void cubicAxis(int64_t n, int64_t m, bool align, double scale, std::vector<int64_t>* index,
               std::vector<O>* weight) {
  const O ratio = linearRatio<O>(n, m, align, scale);
  const O a = O(-0.75);
  auto near = [a](O x) { return ((a + O(2)) * x - (a + O(3))) * x * x + O(1); };
  auto far = [a](O x) { return ((a * x - O(5) * a) * x + O(8) * a) * x - O(4) * a; };
  index->resize(static_cast<size_t>(4 * m));
  weight->resize(static_cast<size_t>(4 * m));
  for (int64_t o = 0; o < m; ++o) {
    const O dst = static_cast<O>(o);
    const O real = align ? ratio * dst : ratio * (dst + O(0.5)) - O(0.5);
    const O i = std::floor(real), t = real - i;
    const O w[4] = {far(t + O(1)), near(t), near(O(1) - t), far((O(1) - t) + O(1))};
    // The taps clamp to [0, n - 1]: i itself clamped first, so the conversion cannot overflow.
    const int64_t base =
        i < O(-2) ? -2 : (i > static_cast<O>(n + 1) ? n + 1 : static_cast<int64_t>(i));
    for (int64_t k = 0; k < 4; ++k) {
      (*index)[4 * o + k] = std::min(std::max<int64_t>(base - 1 + k, 0), n - 1);
      (*weight)[4 * o + k] = w[k];
    }
  }
}

}  // namespace

Status cubicTaps(const Shape& inputSpatial, const Shape& outputSpatial, bool alignCorners,
                 const std::vector<double>& scales, bool wide, CubicTaps* taps) {
  const char* op = "upsample_bicubic2d_backward";
  if (inputSpatial.size() != 2 || outputSpatial.size() != 2 || scales.size() > 2) {
    return Status::invalidArgument(std::string(op) +
                                   ": 2 spatial dimensions (and at most 2 scales)");
  }
  if (std::min({inputSpatial[0], inputSpatial[1], outputSpatial[0], outputSpatial[1]}) < 1) {
    return Status::invalidArgument(std::string(op) + ": a spatial size is 0 or negative");
  }
  taps->inHeight = inputSpatial[0];
  taps->inWidth = inputSpatial[1];
  taps->outHeight = outputSpatial[0];
  taps->outWidth = outputSpatial[1];
  const double sy = !scales.empty() ? scales[0] : 0.0, sx = scales.size() > 1 ? scales[1] : 0.0;
  for (double scale : {sy, sx}) {
    if (std::isnan(scale) || (scale > 0 && !std::isfinite(static_cast<float>(1.0 / scale)))) {
      return Status::invalidArgument(std::string(op) + ": scale factor " + showNumber(scale) +
                                     " gives no finite source position");
    }
  }
  if (wide) {
    cubicAxis(taps->inHeight, taps->outHeight, alignCorners, sy, &taps->ty, &taps->wy64);
    cubicAxis(taps->inWidth, taps->outWidth, alignCorners, sx, &taps->tx, &taps->wx64);
  } else {
    cubicAxis(taps->inHeight, taps->outHeight, alignCorners, sy, &taps->ty, &taps->wy32);
    cubicAxis(taps->inWidth, taps->outWidth, alignCorners, sx, &taps->tx, &taps->wx32);
  }
  return Status::ok();
}

Status cubicCall(DataType type, const Shape& inputSpatial, const Shape& outputSpatial,
                 bool alignCorners, const std::vector<double>& scales, int64_t planes,
                 const void* gradInput, const void* gradOutput, CubicTaps* taps) {
  const std::string op = "upsample_bicubic2d_backward: ";
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument(op + "dtype " + dataTypeName(type) + "; floating point only");
  }
  DETCOLL_RETURN_IF_ERROR(cubicTaps(inputSpatial, outputSpatial, alignCorners, scales,
                                    type == DataType::kFloat64, taps));
  if (planes < 0) return Status::invalidArgument(op + "negative size");
  DETCOLL_RETURN_IF_ERROR(
      sizesFit("upsample_bicubic2d_backward", {planes, inputSpatial[0], inputSpatial[1]}));
  DETCOLL_RETURN_IF_ERROR(
      sizesFit("upsample_bicubic2d_backward", {planes, outputSpatial[0], outputSpatial[1], 16}));
  if (planes > 0 && (gradInput == nullptr || gradOutput == nullptr)) {
    return Status::invalidArgument(op + "grad_input or grad_output is null");
  }
  return Status::ok();
}

Status upsampleBicubicBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, bool alignCorners,
                               const std::vector<double>& scales, int threads) {
  CubicTaps taps;
  DETCOLL_RETURN_IF_ERROR(cubicCall(type, inputSpatial, outputSpatial, alignCorners, scales, planes,
                                    gradInput, gradOutput, &taps));
  const int64_t inputs = taps.inHeight * taps.inWidth, outputs = taps.outHeight * taps.outWidth;
  if (planes == 0) return Status::ok();
  if (inputSpatial == outputSpatial) {
    std::memcpy(gradInput, gradOutput, static_cast<size_t>(planes * inputs) * dataTypeSize(type));
    return Status::ok();
  }
  visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = typename Traits<T>::Acc;
    using O = A;  // the opmath type is the accumulation type for the floating dtypes
    const O* wy = reinterpret_cast<const O*>(std::is_same_v<O, double>
                                                 ? static_cast<const void*>(taps.wy64.data())
                                                 : static_cast<const void*>(taps.wy32.data()));
    const O* wx = reinterpret_cast<const O*>(std::is_same_v<O, double>
                                                 ? static_cast<const void*>(taps.wx64.data())
                                                 : static_cast<const void*>(taps.wx32.data()));
    auto run = [&](int64_t first, int64_t last) {
      std::vector<A> acc(static_cast<size_t>(inputs));
      for (int64_t p = first; p < last; ++p) {
        const T* g = static_cast<const T*>(gradOutput) + p * outputs;
        std::fill(acc.begin(), acc.end(), A{});
        for (int64_t y = 0; y < taps.outHeight; ++y) {
          for (int64_t x = 0; x < taps.outWidth; ++x) {
            const O v = static_cast<O>(Traits<T>::load(g[y * taps.outWidth + x]));
            for (int kx = 0; kx < 4; ++kx) {
              for (int ky = 0; ky < 4; ++ky) {
                const T product = Traits<T>::round((v * wy[4 * y + ky]) * wx[4 * x + kx]);
                A& a = acc[taps.ty[4 * y + ky] * taps.inWidth + taps.tx[4 * x + kx]];
                a = a + Traits<T>::load(product);
              }
            }
          }
        }
        T* out = static_cast<T*>(gradInput) + p * inputs;
        for (int64_t i = 0; i < inputs; ++i) out[i] = Traits<T>::store(acc[i]);
      }
    };
    forEachRange(planes, threads, 1 + planes * 16 * outputs / (256 << 10), run);
  });
  return Status::ok();
}

}  // namespace detcoll::kernels::ops
