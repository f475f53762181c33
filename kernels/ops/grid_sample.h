#pragma once

// grid_sample's backward, 2-D and 3-D (docs/design.md, "Patching torch's operators"): the bodies
// shared by the CPU reference (grid_sample.cc runs them in loops) and the executor's formulation
// (bodies/grid_sample.h), so that both compute each tap, weight and slope with the same
// arithmetic, in the accumulation type A (float for float32, float16 and bfloat16; double for
// float64).
//
// Output position p of batch element b reads, for every channel, the input at its grid point.
// Along input axis a (depth, height, width), read by grid coordinate spatial - 1 - a, the point is
// torch's source index: unnormalized from [-1, 1] (align_corners: ((c + 1) / 2)(n - 1), else
// ((c + 1) n - 1) / 2), then clipped to [0, n - 1] (border) or reflected and clipped
// (reflection), with the derivative of each step (0 where a clip bound). Its taps:
//   bilinear  the 2^d corners row-major (depth, height, width bits), weight the product of the
//             axes' factors (n0 = i0 + 1 - c, n1 = c - i0), width's first;
//   nearest   the position rounded half to even, weight 1;
//   bicubic   (2-D) the 16 taps x outer, y inner, each padded on its own (clamped, or reflected
//             and clamped), weight x coefficient · y coefficient (A = -0.75; the unpadded point).
// Taps outside the input are left out.
//
// The input's gradient adds, per channel, weight · gradient for every tap, in the order of the
// output positions and then of the taps, from zero in A, rounded once (the segment engine's
// contract). The grid's gradient of position p along coordinate k is
//   derivative · Σ_channels gradient · (Σ_taps slope · input at the tap)
// the two sums in order (channels outer, taps inner) in A, rounded once; the slope is the
// weight's derivative along the axis (bilinear: ± the other axes' factors, width's first;
// bicubic: minus the coefficient's slope times the other axis' coefficient); nearest's is 0.

#include <cmath>
#include <cstdint>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/accumulate.h"

namespace detcoll::kernels::ops {

enum class GridMode : int { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum class GridPadding : int { kZeros = 0, kBorder = 1, kReflection = 2 };

struct GridSample {
  int spatial = 2;                  // 2 or 3
  int64_t batch = 0, channels = 0;  // N, C
  int64_t sizes[3] = {1, 1, 1};     // the input's spatial sizes, first axis first
  int64_t positions = 0;            // output positions per batch element
  GridMode mode = GridMode::kBilinear;
  GridPadding padding = GridPadding::kZeros;
  bool alignCorners = false;
  DETCOLL_HOST_DEVICE int64_t inner() const {
    int64_t n = 1;
    for (int a = 0; a < spatial; ++a) n *= sizes[a];
    return n;
  }
};

// Checks the geometry and the buffers (grad_input and grad_grid may be null: not wanted).
Status checkGridSample(const GridSample& g, DataType type, const void* gradInput,
                       const void* gradGrid, const void* gradOutput, const void* input,
                       const void* grid);

constexpr int kMaxGridTaps = 16;

// One position's taps: the input position of each (-1: outside), its weight, and per grid
// coordinate k the slopes and the derivative.
template <typename A>
struct GridTaps {
  int count = 0;
  int64_t at[kMaxGridTaps];
  A weight[kMaxGridTaps];
  A slope[3][kMaxGridTaps];
  A derivative[3];
};

namespace grid {

template <typename A>
DETCOLL_HOST_DEVICE A floorOf(A v) {
  return static_cast<A>(::floor(static_cast<double>(v)));
}

// torch's reflect_coordinates: *sign gets the derivative's factor (±1, 0 for a single point). A
// coordinate that is not finite gives NaN.
template <typename A>
DETCOLL_HOST_DEVICE A reflect(A in, int64_t twiceLow, int64_t twiceHigh, A* sign) {
  if (twiceLow == twiceHigh) {
    *sign = A(0);
    return A(0);
  }
  const A low = static_cast<A>(twiceLow) / A(2);
  const A span = static_cast<A>(twiceHigh - twiceLow) / A(2);
  in = in - low;
  A s = A(1);
  if (in < A(0)) {
    s = A(-1);
    in = -in;
  }
  if (!(in - in == A(0))) return in - in;  // NaN or infinite: NaN, which clip makes 0
  const A extra = static_cast<A>(::fmod(static_cast<double>(in), static_cast<double>(span)));
  // The flips' parity in floating point: no integer conversion, whatever their number.
  const A flips = floorOf<A>(in / span);
  if (::fmod(static_cast<double>(flips), 2.0) == 0.0) {
    *sign = s;
    return extra + low;
  }
  *sign = -s;
  return span - extra + low;
}

// Clipped to [0, n - 1]: *keep 0 where it clipped. NaN clips to 0, as torch's forward clips it.
template <typename A>
DETCOLL_HOST_DEVICE A clip(A in, int64_t n, A* keep) {
  const A high = static_cast<A>(n - 1);
  if (!(in > A(0))) {
    *keep = A(0);
    return A(0);
  }
  if (in >= high) {
    *keep = A(0);
    return high;
  }
  *keep = A(1);
  return in;
}

// The source index along an axis of n inputs, and its derivative with respect to the grid value.
template <typename A>
DETCOLL_HOST_DEVICE A source(A c, int64_t n, GridPadding padding, bool align, A* derivative) {
  A x;
  if (align) {
    x = ((c + A(1)) / A(2)) * static_cast<A>(n - 1);
    *derivative = static_cast<A>(n - 1) / A(2);
  } else {
    x = ((c + A(1)) * static_cast<A>(n) - A(1)) / A(2);
    *derivative = static_cast<A>(n) / A(2);
  }
  A factor = A(1);
  if (padding == GridPadding::kBorder) {
    x = clip(x, n, &factor);
    *derivative = *derivative * factor;
  } else if (padding == GridPadding::kReflection) {
    x = align ? reflect(x, 0, 2 * (n - 1), &factor) : reflect(x, -1, 2 * n - 1, &factor);
    *derivative = *derivative * factor;
    x = clip(x, n, &factor);
    *derivative = *derivative * factor;
  }
  return x;
}

// A bicubic tap's position padded on its own; -1 outside.
template <typename A>
DETCOLL_HOST_DEVICE int64_t cubicTap(A i, int64_t n, GridPadding padding, bool align) {
  A unused;
  if (padding == GridPadding::kBorder) {
    i = clip(i, n, &unused);
  } else if (padding == GridPadding::kReflection) {
    i = align ? reflect(i, 0, 2 * (n - 1), &unused) : reflect(i, -1, 2 * n - 1, &unused);
    i = clip(i, n, &unused);
  }
  return i >= A(0) && i < static_cast<A>(n) ? static_cast<int64_t>(i) : -1;
}

// torch's cubic convolution coefficients of t in [0, 1), and their slopes.
template <typename A>
DETCOLL_HOST_DEVICE A near(A x, A a) {
  return ((a + A(2)) * x - (a + A(3))) * x * x + A(1);
}
template <typename A>
DETCOLL_HOST_DEVICE A far(A x, A a) {
  return ((a * x - A(5) * a) * x + A(8) * a) * x - A(4) * a;
}

template <typename A>
DETCOLL_HOST_DEVICE void cubic(A t, A* coefficient, A* slope) {
  const A a = A(-0.75);
  coefficient[0] = far(t + A(1), a);
  coefficient[1] = near(t, a);
  coefficient[2] = near(A(1) - t, a);
  coefficient[3] = far(A(2) - t, a);
  const A v0 = A(-1) - t, v1 = -t, v2 = A(1) - t, v3 = A(2) - t;
  slope[0] = (A(-3) * a * v0 - A(10) * a) * v0 - A(8) * a;
  slope[1] = (A(-3) * (a + A(2)) * v1 - A(2) * (a + A(3))) * v1;
  slope[2] = (A(3) * (a + A(2)) * v2 - A(2) * (a + A(3))) * v2;
  slope[3] = (A(3) * a * v3 - A(10) * a) * v3 + A(8) * a;
}

}  // namespace grid

// The taps of position p of batch element b; grid [N, positions, spatial] in T.
template <typename T, typename A>
DETCOLL_HOST_DEVICE void gridTaps(const GridSample& s, const T* gridValues, int64_t b, int64_t p,
                                  GridTaps<A>* t) {
  const int d = s.spatial;
  const T* point = gridValues + (b * s.positions + p) * d;
  A coord[3], derivative[3];
  const GridPadding padding = s.mode == GridMode::kBicubic ? GridPadding::kZeros : s.padding;
  for (int a = 0; a < d; ++a) {
    const A c = static_cast<A>(kernels::Traits<T>::load(point[d - 1 - a]));
    coord[a] = grid::source(c, s.sizes[a], padding, s.alignCorners, &derivative[a]);
    t->derivative[d - 1 - a] = derivative[a];
  }
  if (s.mode == GridMode::kNearest) {
    int64_t at = 0;
    for (int a = 0; a < d; ++a) {
      const A i = static_cast<A>(::nearbyint(static_cast<double>(coord[a])));
      const bool inside = i >= A(0) && i < static_cast<A>(s.sizes[a]);
      at = at < 0 || !inside ? -1 : at * s.sizes[a] + static_cast<int64_t>(i);
    }
    t->count = 1;
    t->at[0] = at;
    t->weight[0] = A(1);
    for (int k = 0; k < d; ++k) t->slope[k][0] = A(0);
    return;
  }
  if (s.mode == GridMode::kBicubic) {  // axes 0 (y) and 1 (x)
    const A y0 = grid::floorOf(coord[0]), x0 = grid::floorOf(coord[1]);
    A cy[4], sy[4], cx[4], sx[4];
    grid::cubic(coord[0] - y0, cy, sy);
    grid::cubic(coord[1] - x0, cx, sx);
    t->count = 16;
    for (int i = 0; i < 4; ++i) {
      const int64_t xi =
          grid::cubicTap(x0 - A(1) + static_cast<A>(i), s.sizes[1], s.padding, s.alignCorners);
      for (int j = 0; j < 4; ++j) {
        const int64_t yj =
            grid::cubicTap(y0 - A(1) + static_cast<A>(j), s.sizes[0], s.padding, s.alignCorners);
        const int k = 4 * i + j;
        t->at[k] = xi < 0 || yj < 0 ? -1 : yj * s.sizes[1] + xi;
        t->weight[k] = cx[i] * cy[j];
        t->slope[0][k] = -(sx[i] * cy[j]);  // grid coordinate 0: x
        t->slope[1][k] = -(sy[j] * cx[i]);
      }
    }
    return;
  }
  A low[3], factor[3][2];
  for (int a = 0; a < d; ++a) {
    low[a] = grid::floorOf(coord[a]);
    factor[a][0] = (low[a] + A(1)) - coord[a];
    factor[a][1] = coord[a] - low[a];
  }
  t->count = 1 << d;
  for (int k = 0; k < t->count; ++k) {
    int64_t at = 0;
    A w = A(0);
    for (int a = d - 1; a >= 0; --a) {  // the width's factor first
      const int bit = (k >> (d - 1 - a)) & 1;
      w = a == d - 1 ? factor[a][bit] : w * factor[a][bit];
    }
    for (int a = 0; a < d; ++a) {
      const int bit = (k >> (d - 1 - a)) & 1;
      const A i = low[a] + static_cast<A>(bit);
      const bool inside = i >= A(0) && i < static_cast<A>(s.sizes[a]);
      at = at < 0 || !inside ? -1 : at * s.sizes[a] + static_cast<int64_t>(i);
      // d weight / d coordinate along axis a: ± the other axes' factors, the width's first.
      A other = A(1);
      bool first = true;
      for (int o = d - 1; o >= 0; --o) {
        if (o == a) continue;
        const int ob = (k >> (d - 1 - o)) & 1;
        other = first ? factor[o][ob] : other * factor[o][ob];
        first = false;
      }
      t->slope[d - 1 - a][k] = bit ? other : -other;
    }
    t->at[k] = at;
    t->weight[k] = w;
  }
}

// The grid's gradient of (b, p), every coordinate: written to gradGrid [N, positions, spatial].
template <typename T>
struct GridGradBody {
  using A = typename kernels::Traits<T>::Acc;
  GridSample s;
  const T *gridValues, *input, *gradOutput;
  T* gradGrid;
  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t b = t / s.positions, p = t % s.positions;
    GridTaps<A> taps;
    gridTaps<T, A>(s, gridValues, b, p, &taps);
    const int64_t inner = s.inner();
    for (int k = 0; k < s.spatial; ++k) {
      A sum = A(0);
      if (s.mode != GridMode::kNearest) {
        for (int64_t c = 0; c < s.channels; ++c) {
          const T* plane = input + (b * s.channels + c) * inner;
          A along = A(0);
          for (int j = 0; j < taps.count; ++j) {
            if (taps.at[j] >= 0)
              along = along + taps.slope[k][j] * kernels::Traits<T>::load(plane[taps.at[j]]);
          }
          sum = sum + kernels::Traits<T>::load(gradOutput[(b * s.channels + c) * s.positions + p]) *
                          along;
        }
      }
      gradGrid[t * s.spatial + k] = kernels::Traits<T>::store(
          s.mode == GridMode::kNearest || inner == 0 || s.channels == 0 ? A(0)
                                                                        : taps.derivative[k] * sum);
    }
  }
};

// Position p of batch element b: its taps' input positions (-1: outside), weights and the
// position they read the gradient of, at p · taps + j.
template <typename T>
struct GridTapBody {
  using A = typename kernels::Traits<T>::Acc;
  GridSample s;
  const T* gridValues;
  int64_t b;
  int taps;  // per position
  int64_t* at;
  A* weight;
  int64_t* row;
  DETCOLL_HOST_DEVICE void operator()(int64_t p) const {
    GridTaps<A> g;
    gridTaps<T, A>(s, gridValues, b, p, &g);
    for (int j = 0; j < taps; ++j) {
      at[p * taps + j] = g.at[j];
      weight[p * taps + j] = g.weight[j];
      row[p * taps + j] = p;
    }
  }
};

// The number of taps per position.
inline int gridTapCount(const GridSample& s) {
  return s.mode == GridMode::kNearest ? 1 : (s.mode == GridMode::kBicubic ? 16 : 1 << s.spatial);
}

// The CPU reference: gradInput [N, C, *sizes] and gradGrid [N, *output, spatial], either null
// when not wanted; gradOutput [N, C, positions], input [N, C, *sizes], grid [N, positions,
// spatial]. threads <= 0: the hardware's; the bits never depend on it.
Status gridSamplerBackward(void* gradInput, void* gradGrid, const void* gradOutput,
                           const void* input, const void* gridValues, DataType type,
                           const GridSample& s, int threads);

}  // namespace detcoll::kernels::ops
