#pragma once

// The per-pixel bodies of resample.h, one call per output element, compiled for the host (the
// CPU reference runs them in a loop) and for the device (the CUDA kernels run them in a grid).
// Which inputs each bilinear output reads is tabulated once on the host, per axis, in the
// accumulation type; host and device read the same table, so the weights are the same bits.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/host_device.h"
#include "kernels/accumulate.h"
#include "kernels/ops/resample.h"

namespace detcoll::kernels::ops::resample {

// Keeps the smallest position written to *slot (which starts at INT64_MAX): the first bad entry
// of a check, the same whatever the thread order.
DETCOLL_HOST_DEVICE inline void recordFirst(int64_t* slot, int64_t position) {
#if defined(__CUDA_ARCH__)
  atomicMin(reinterpret_cast<unsigned long long*>(slot), static_cast<unsigned long long>(position));
#else
  if (position < *slot) *slot = position;
#endif
}

// One axis of a bilinear resampling: output o reads inputs i0[o], i1[o] with weights l0[o],
// l1[o]; input i is read by outputs[offsets[i] .. offsets[i + 1]), ascending, with mask bit a set
// when i = i_a(o).
template <typename A>
struct LinearAxisTable {
  std::vector<int64_t> i0, i1;
  std::vector<A> l0, l1;
  std::vector<int64_t> offsets, outputs;
  std::vector<uint8_t> masks;
};

template <typename A>
LinearAxisTable<A> linearAxis(int64_t in, int64_t out, bool alignCorners, double scaleFactor) {
  LinearAxisTable<A> t;
  t.l0.resize(out);
  t.l1.resize(out);
  std::vector<int64_t>& i0 = t.i0;
  std::vector<int64_t>& i1 = t.i1;
  i0.resize(out);
  i1.resize(out);
  A scale;
  if (alignCorners) {
    scale = out > 1 ? static_cast<A>(in - 1) / static_cast<A>(out - 1) : A(0);
  } else {
    scale = scaleFactor > 0 ? static_cast<A>(1.0 / scaleFactor)
                            : static_cast<A>(in) / static_cast<A>(out);
  }
  for (int64_t o = 0; o < out; ++o) {
    if (out == in) {
      i0[o] = i1[o] = o;
      t.l0[o] = A(1);
      t.l1[o] = A(0);
      continue;
    }
    // The source position is formed and kept in double (as PyTorch's CPU kernel does), from
    // the scale in A; the weight is its distance to i0, rounded once to A.
    const double step = static_cast<double>(scale);
    double r =
        alignCorners ? step * static_cast<double>(o) : step * (static_cast<double>(o) + 0.5) - 0.5;
    if (r < 0) r = 0;
    // Past the last input (a huge scale) the source is the last input: no overflowing cast.
    i0[o] = r < static_cast<double>(in - 1) ? static_cast<int64_t>(std::floor(r)) : in - 1;
    i1[o] = i0[o] + (i0[o] < in - 1 ? 1 : 0);
    t.l1[o] = static_cast<A>(std::min(std::max(r - static_cast<double>(i0[o]), 0.0), 1.0));
    t.l0[o] = A(1) - t.l1[o];
  }
  // A stable counting sort of the (input, output) pairs by input.
  t.offsets.assign(in + 1, 0);
  for (int64_t o = 0; o < out; ++o) {
    ++t.offsets[i0[o] + 1];
    if (i1[o] != i0[o]) ++t.offsets[i1[o] + 1];
  }
  for (int64_t i = 0; i < in; ++i) t.offsets[i + 1] += t.offsets[i];
  t.outputs.resize(t.offsets[in]);
  t.masks.resize(t.offsets[in]);
  std::vector<int64_t> next(t.offsets.begin(), t.offsets.end() - 1);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t j = next[i0[o]]++;
    t.outputs[j] = o;
    t.masks[j] = i1[o] == i0[o] ? 3 : 1;
    if (i1[o] != i0[o]) {
      const int64_t k = next[i1[o]]++;
      t.outputs[k] = o;
      t.masks[k] = 2;
    }
  }
  return t;
}

template <typename A>
struct LinearAxisView {
  const A* l0;
  const A* l1;
  const int64_t* offsets;
  const int64_t* outputs;
  const uint8_t* masks;
};

// Input pixel t (plane-major): its gradient.
template <typename T>
struct BilinearBackwardBody {
  using A = typename kernels::Traits<T>::Acc;
  T* gradInput;
  const T* gradOutput;
  int64_t inHeight, inWidth, outHeight, outWidth;
  LinearAxisView<A> h, w;

  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t plane = t / (inHeight * inWidth), pixel = t % (inHeight * inWidth);
    const int64_t y = pixel / inWidth, x = pixel % inWidth;
    const T* g = gradOutput + plane * outHeight * outWidth;
    A acc = A(0);
    for (int64_t jh = h.offsets[y]; jh < h.offsets[y + 1]; ++jh) {
      const int64_t oh = h.outputs[jh];
      const unsigned mh = h.masks[jh];
      for (int64_t jw = w.offsets[x]; jw < w.offsets[x + 1]; ++jw) {
        const int64_t ow = w.outputs[jw];
        const unsigned mw = w.masks[jw];
        const A value = kernels::Traits<T>::load(g[oh * outWidth + ow]);
        for (unsigned a = 0; a < 2; ++a) {
          if (!((mh >> a) & 1u)) continue;
          const A la = a == 0 ? h.l0[oh] : h.l1[oh];
          for (unsigned b = 0; b < 2; ++b) {
            if (!((mw >> b) & 1u)) continue;
            const A lb = b == 0 ? w.l0[ow] : w.l1[ow];
            acc = acc + (la * lb) * value;
          }
        }
      }
    }
    gradInput[t] = kernels::Traits<T>::store(acc);
  }
};

// The pooling geometry with its output size, plain data for a kernel's arguments.
struct PoolGeometry {
  int64_t inHeight, inWidth, outHeight, outWidth;
  int64_t kernelHeight, kernelWidth, strideHeight, strideWidth;
  int64_t padHeight, padWidth, dilationHeight, dilationWidth;
};

inline PoolGeometry geometry(const Pool2d& p, int64_t outHeight, int64_t outWidth) {
  return {p.inHeight,     p.inWidth,     outHeight,        outWidth,
          p.kernelHeight, p.kernelWidth, p.strideHeight,   p.strideWidth,
          p.padHeight,    p.padWidth,    p.dilationHeight, p.dilationWidth};
}

// The taps of a window along one axis that fall inside [0, size): from *first (the window's
// start stepped past the padding) below *end, dilation apart. False when there are none (a
// dilation wider than the input can leave a window in the padding alone).
DETCOLL_HOST_DEVICE inline bool windowTaps(int64_t start, int64_t kernel, int64_t dilation,
                                           int64_t size, int64_t* first, int64_t* end) {
  *end = start + (kernel - 1) * dilation + 1 < size ? start + (kernel - 1) * dilation + 1 : size;
  if (start < 0) start += (-start + dilation - 1) / dilation * dilation;  // the first tap >= 0
  *first = start;
  return start < *end;
}

// Output element t (plane-major): its maximum and index. A window with no tap inside the input
// is -inf with the index of its first stepped tap (PyTorch's result), and its gradient goes
// nowhere.
template <typename T>
struct MaxPoolForwardBody {
  using A = typename kernels::Traits<T>::Acc;
  T* out;
  int64_t* indices;
  const T* in;
  PoolGeometry g;

  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t outPlane = g.outHeight * g.outWidth;
    element(t / outPlane, (t % outPlane) / g.outWidth, t % g.outWidth, t);
  }
  // Output row r (plane r / outHeight, row r % outHeight), element by element: the host's
  // loop, with no division per element.
  DETCOLL_HOST_DEVICE void row(int64_t r) const {
    const int64_t plane = r / g.outHeight, oh = r % g.outHeight;
    for (int64_t ow = 0; ow < g.outWidth; ++ow) element(plane, oh, ow, r * g.outWidth + ow);
  }
  DETCOLL_HOST_DEVICE void element(int64_t plane, int64_t oh, int64_t ow, int64_t t) const {
    const T* x = in + plane * g.inHeight * g.inWidth;
    int64_t y0, y1, x0, x1;
    const bool rows = windowTaps(oh * g.strideHeight - g.padHeight, g.kernelHeight,
                                 g.dilationHeight, g.inHeight, &y0, &y1);
    const bool columns = windowTaps(ow * g.strideWidth - g.padWidth, g.kernelWidth, g.dilationWidth,
                                    g.inWidth, &x0, &x1);
    if (!rows || !columns) {
      out[t] = kernels::Traits<T>::round(-A(INFINITY));
      indices[t] = y0 * g.inWidth + x0;
      return;
    }
    int64_t best = y0 * g.inWidth + x0;
    A bestValue = -A(INFINITY);
    for (int64_t y = y0; y < y1; y += g.dilationHeight) {
      for (int64_t xx = x0; xx < x1; xx += g.dilationWidth) {
        const A v = kernels::Traits<T>::load(x[y * g.inWidth + xx]);
        if (v > bestValue || v != v) {
          bestValue = v;
          best = y * g.inWidth + xx;
        }
      }
    }
    // The input's own bits (a NaN keeps its payload, as PyTorch's does).
    out[t] = x[best];
    indices[t] = best;
  }
};

// Output element t: is its index a position of its window? The first that is not goes to *bad.
struct MaxPoolIndexCheckBody {
  const int64_t* indices;
  PoolGeometry g;
  int64_t* bad;

  DETCOLL_HOST_DEVICE static bool onAxis(int64_t i, int64_t start, int64_t kernel, int64_t dilation,
                                         int64_t size) {
    const int64_t k = i - start;
    if (dilation == 1) return i >= 0 && i < size && k >= 0 && k < kernel;  // no division
    return i >= 0 && i < size && k >= 0 && k % dilation == 0 && k / dilation < kernel;
  }

  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t outPlane = g.outHeight * g.outWidth;
    const int64_t oh = (t % outPlane) / g.outWidth, ow = t % g.outWidth;
    const int64_t index = indices[t];
    int64_t y0, y1, x0, x1;
    const bool rows = windowTaps(oh * g.strideHeight - g.padHeight, g.kernelHeight,
                                 g.dilationHeight, g.inHeight, &y0, &y1);
    const bool columns = windowTaps(ow * g.strideWidth - g.padWidth, g.kernelWidth, g.dilationWidth,
                                    g.inWidth, &x0, &x1);
    const bool inside = !rows || !columns
                            ? index == y0 * g.inWidth + x0  // the empty window's index
                            : index >= 0 && index < g.inHeight * g.inWidth &&
                                  onAxis(index / g.inWidth, oh * g.strideHeight - g.padHeight,
                                         g.kernelHeight, g.dilationHeight, g.inHeight) &&
                                  onAxis(index % g.inWidth, ow * g.strideWidth - g.padWidth,
                                         g.kernelWidth, g.dilationWidth, g.inWidth);
    if (!inside) recordFirst(bad, t);
  }
};

// Input pixel t (plane-major): the sum of the gradients of the outputs whose index is t's
// position, in row-major output order. The outputs whose windows hold row y are those with
// oh sH - pH + kh dH = y; kh from the last down gives oh ascending (likewise for columns).
template <typename T>
struct MaxPoolBackwardBody {
  using A = typename kernels::Traits<T>::Acc;
  T* gradInput;
  const T* gradOutput;
  const int64_t* indices;
  PoolGeometry g;

  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t inPlane = g.inHeight * g.inWidth, outPlane = g.outHeight * g.outWidth;
    const int64_t plane = t / inPlane, position = t % inPlane;
    const int64_t y = position / g.inWidth, x = position % g.inWidth;
    const T* grad = gradOutput + plane * outPlane;
    const int64_t* index = indices + plane * outPlane;
    A acc = A(0);
    for (int64_t kh = g.kernelHeight - 1; kh >= 0; --kh) {
      const int64_t rowNumerator = y + g.padHeight - kh * g.dilationHeight;
      if (rowNumerator < 0 || rowNumerator % g.strideHeight != 0) continue;
      const int64_t oh = rowNumerator / g.strideHeight;
      if (oh >= g.outHeight) continue;
      for (int64_t kw = g.kernelWidth - 1; kw >= 0; --kw) {
        const int64_t columnNumerator = x + g.padWidth - kw * g.dilationWidth;
        if (columnNumerator < 0 || columnNumerator % g.strideWidth != 0) continue;
        const int64_t ow = columnNumerator / g.strideWidth;
        if (ow >= g.outWidth) continue;
        const int64_t o = oh * g.outWidth + ow;
        if (index[o] == position) acc = acc + kernels::Traits<T>::load(grad[o]);
      }
    }
    gradInput[t] = kernels::Traits<T>::store(acc);
  }
};

}  // namespace detcoll::kernels::ops::resample
