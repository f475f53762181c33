#pragma once

// The backward of bicubic upsampling (2-D), in torch's arithmetic (docs/design.md, "Patching
// torch's operators"). Per axis of n inputs and m outputs, in the opmath type O (float for
// float32, float16 and bfloat16; double for float64): with the linear ratio of taps.h, the source
// r = ratio · o where the corners align, else ratio · (o + 0.5) - 0.5 (not clamped); i = floor(r),
// t = r - i; the taps i - 1 .. i + 2, clamped to [0, n - 1], weigh
//   far(t + 1), near(t), near(1 - t), far((1 - t) + 1)
//   near(x) = ((A + 2) x - (A + 3)) x x + 1,  far(x) = ((A x - 5A) x + 8A) x - 4A,  A = -0.75.
// Output (y, x) has 16 taps, x's outer and y's inner, as torch's loop takes them; tap (ky, kx)
// contributes (g · wy[ky]) · wx[kx], formed in O and rounded to the dtype, added into input
// (ty[ky], tx[kx]) in the order of the output positions, then of the taps, from zero in the
// accumulation type, rounded once (weightedScatter without weights). Equal sizes: a copy, as
// torch's shortcut.

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/accumulate.h"
#include "kernels/ops/scatter.h"

namespace detcoll::kernels::ops {

// Both axes' taps and coefficients, 4 per output position (y first).
struct CubicTaps {
  int64_t inHeight = 0, inWidth = 0, outHeight = 0, outWidth = 0;
  std::vector<int64_t> ty, tx;
  std::vector<float> wy32, wx32;   // float32, float16, bfloat16
  std::vector<double> wy64, wx64;  // float64
};

// The taps of [planes, *inputSpatial] from [planes, *outputSpatial] (2 spatial dimensions);
// scales per axis (<= 0: none); wide: float64 coefficients.
Status cubicTaps(const Shape& inputSpatial, const Shape& outputSpatial, bool alignCorners,
                 const std::vector<double>& scales, bool wide, CubicTaps* taps);

// The checks the CPU reference and the executor's formulation share (the dtype, the sizes, the
// buffers), then the taps.
Status cubicCall(DataType type, const Shape& inputSpatial, const Shape& outputSpatial,
                 bool alignCorners, const std::vector<double>& scales, int64_t planes,
                 const void* gradInput, const void* gradOutput, CubicTaps* taps);

// Source s = o · 16 + kx · 4 + ky of plane p (t = p · outputs · 16 + s): its rounded product.
template <typename T, typename O>
struct CubicProductsBody {
  const T* grad;
  const O *wy, *wx;
  int64_t outWidth, outputs;
  T* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t k = t % 16, o = (t / 16) % outputs, p = t / (16 * outputs);
    const O v = static_cast<O>(kernels::Traits<T>::load(grad[p * outputs + o]));
    out[t] = kernels::Traits<T>::round((v * wy[(o / outWidth) * 4 + k % 4]) *
                                       wx[(o % outWidth) * 4 + k / 4]);
  }
};

// Source s's input position within its plane.
struct CubicDestinationBody {
  const int64_t *ty, *tx;
  int64_t outWidth, inWidth;
  int64_t* destination;
  DETCOLL_HOST_DEVICE void operator()(int64_t s) const {
    const int64_t k = s % 16, o = s / 16;
    destination[s] = ty[(o / outWidth) * 4 + k % 4] * inWidth + tx[(o % outWidth) * 4 + k / 4];
  }
};

// The CPU reference: threads take whole planes.
Status upsampleBicubicBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, bool alignCorners,
                               const std::vector<double>& scales, int threads);

}  // namespace detcoll::kernels::ops
