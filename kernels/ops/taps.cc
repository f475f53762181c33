#include "kernels/ops/taps.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/ops/op_checks.h"
#include "kernels/ops/segment.h"

namespace detcoll::kernels::ops {
namespace {

// One axis' taps: `taps` per output position, index[o * taps + t] and weight[o * taps + t].
template <typename O>
struct Axis {
  int64_t inputs = 0, outputs = 0, taps = 1;
  std::vector<int64_t> index;
  std::vector<O> weight;  // empty: 1
};

// Separable taps: the axes, padded in front to three with one-position, one-tap axes of weight
// 1, kept for expandTaps or an executor's CombineBody.
template <typename O>
void combine(std::vector<Axis<O>> axes, Taps* taps) {
  const bool weighted = !axes.front().weight.empty();
  while (axes.size() < 3) {
    Axis<O> unit;
    unit.inputs = unit.outputs = unit.taps = 1;
    unit.index = {0};
    if (weighted) unit.weight = {O(1)};
    axes.insert(axes.begin(), unit);
  }
  taps->axes.assign(3, TapAxis{});
  taps->inputs = taps->outputs = 1;
  for (int a = 0; a < 3; ++a) {
    TapAxis& t = taps->axes[a];
    t.inputs = axes[a].inputs;
    t.outputs = axes[a].outputs;
    t.taps = axes[a].taps;
    t.index = axes[a].index;
    if constexpr (std::is_same_v<O, double>) {
      t.weight64 = axes[a].weight;
    } else {
      t.weight32 = axes[a].weight;
    }
    taps->inputs *= t.inputs;
    taps->outputs *= t.outputs;
  }
}

// CombineBody's arithmetic in nested loops (no division per tap); the serial run of the device's
// CombineBody is tested against it.
template <typename O>
void expandAs(Taps* taps, std::vector<O>* weights) {
  const TapAxis &a = taps->axes[0], &b = taps->axes[1], &c = taps->axes[2];
  const bool weighted = !a.weight32.empty() || !a.weight64.empty();
  const O* w[3];
  for (int k = 0; k < 3; ++k) {
    const TapAxis& t = taps->axes[k];
    if constexpr (std::is_same_v<O, double>) {
      w[k] = t.weight64.data();
    } else {
      w[k] = t.weight32.data();
    }
  }
  const int64_t per = a.taps * b.taps * c.taps, n = taps->outputs * per;
  taps->destination.resize(static_cast<size_t>(n));
  if (per > 1) taps->rows.resize(static_cast<size_t>(n));
  if (weighted) weights->resize(static_cast<size_t>(n));
  int64_t at = 0, flat = 0;
  for (int64_t oa = 0; oa < a.outputs; ++oa) {
    for (int64_t ob = 0; ob < b.outputs; ++ob) {
      for (int64_t oc = 0; oc < c.outputs; ++oc, ++flat) {
        for (int64_t ja = oa * a.taps; ja < (oa + 1) * a.taps; ++ja) {
          for (int64_t jb = ob * b.taps; jb < (ob + 1) * b.taps; ++jb) {
            for (int64_t jc = oc * c.taps; jc < (oc + 1) * c.taps; ++jc, ++at) {
              taps->destination[at] =
                  (a.index[ja] * b.inputs + b.index[jb]) * c.inputs + c.index[jc];
              if (per > 1) taps->rows[at] = flat;
              if (weighted) (*weights)[at] = (w[0][ja] * w[1][jb]) * w[2][jc];
            }
          }
        }
      }
    }
  }
}

// One axis of a window op: output o reads the inputs [lo[o], hi[o]).
struct Ranges {
  int64_t inputs = 1;
  std::vector<int64_t> lo{0}, hi{1};
};

// The taps of windows over up to three axes (padded in front with one-input axes): each output
// position's inputs row-major, output positions row-major; rows name the output.
void windowTaps(std::vector<Ranges> axes, Taps* taps) {
  while (axes.size() < 3) axes.insert(axes.begin(), Ranges{});
  const Ranges &a = axes[0], &b = axes[1], &c = axes[2];
  const int64_t na = static_cast<int64_t>(a.lo.size()), nb = static_cast<int64_t>(b.lo.size()),
                nc = static_cast<int64_t>(c.lo.size());
  taps->inputs = a.inputs * b.inputs * c.inputs;
  taps->outputs = na * nb * nc;
  taps->destination.clear();
  taps->rows.clear();
  int64_t flat = 0;
  for (int64_t oa = 0; oa < na; ++oa) {
    for (int64_t ob = 0; ob < nb; ++ob) {
      for (int64_t oc = 0; oc < nc; ++oc, ++flat) {
        for (int64_t ia = a.lo[oa]; ia < a.hi[oa]; ++ia) {
          for (int64_t ib = b.lo[ob]; ib < b.hi[ob]; ++ib) {
            for (int64_t ic = c.lo[oc]; ic < c.hi[oc]; ++ic) {
              taps->destination.push_back((ia * b.inputs + ib) * c.inputs + ic);
              taps->rows.push_back(flat);
            }
          }
        }
      }
    }
  }
}

Status spatialOf(const char* op, size_t rank) {
  if (rank < 1 || rank > 3) {
    return Status::invalidArgument(std::string(op) + ": " + std::to_string(rank) +
                                   " spatial dimensions; 1 to 3");
  }
  return Status::ok();
}

// torch's min(floor(o · step), n - 1), the minimum taken before the conversion to an integer.
int64_t nearestIndex(float f, int64_t n) {
  return f < static_cast<float>(n - 1) ? static_cast<int64_t>(f) : n - 1;
}

template <typename O>
Axis<O> linearAxis(int64_t n, int64_t m, bool align, double scale) {
  Axis<O> a;
  a.inputs = n;
  a.outputs = m;
  a.taps = 2;
  a.index.resize(static_cast<size_t>(2 * m));
  a.weight.resize(static_cast<size_t>(2 * m));
  const O ratio = linearRatio<O>(n, m, align, scale);
  for (int64_t o = 0; o < m; ++o) {
    if (n == m) {
      a.index[2 * o] = a.index[2 * o + 1] = o;
      a.weight[2 * o] = 1;
      a.weight[2 * o + 1] = 0;
      continue;
    }
    O real = align ? ratio * static_cast<O>(o) : ratio * (static_cast<O>(o) + O(0.5)) - O(0.5);
    if (!align && real < 0) real = 0;
    // Past the last input (a huge ratio) the source is the last input: no overflowing cast.
    const int64_t i0 = real < static_cast<O>(n - 1) ? static_cast<int64_t>(real) : n - 1;
    const O l1 = std::min(std::max(real - static_cast<O>(i0), O(0)), O(1));
    a.index[2 * o] = i0;
    a.index[2 * o + 1] = i0 + (i0 < n - 1 ? 1 : 0);
    a.weight[2 * o] = O(1) - l1;
    a.weight[2 * o + 1] = l1;
  }
  return a;
}

}  // namespace

void expandTaps(Taps* taps) {
  if (taps->axes.empty() || !taps->destination.empty()) return;
  if (!taps->axes[0].weight64.empty()) {
    expandAs(taps, &taps->weights64);
  } else {
    expandAs(taps, &taps->weights32);
  }
}

Status padTaps(const Shape& inputSpatial, const std::vector<int64_t>& padding, bool reflect,
               Taps* taps) {
  const char* op = reflect ? "reflection_pad_backward" : "replication_pad_backward";
  DETCOLL_RETURN_IF_ERROR(spatialOf(op, inputSpatial.size()));
  const size_t rank = inputSpatial.size();
  if (padding.size() != 2 * rank) {
    return Status::invalidArgument(std::string(op) + ": " + std::to_string(padding.size()) +
                                   " padding values for " + std::to_string(rank) +
                                   " spatial dimensions");
  }
  std::vector<Axis<float>> axes(rank);
  for (size_t a = 0; a < rank; ++a) {
    // torch's list names the last dimension first.
    const int64_t n = inputSpatial[a], lo = padding[2 * (rank - 1 - a)],
                  hi = padding[2 * (rank - 1 - a) + 1], m = n + lo + hi;
    if (n < 1 || m < 1 || (reflect && (lo >= n || hi >= n))) {
      return Status::invalidArgument(std::string(op) + ": padding (" + std::to_string(lo) + ", " +
                                     std::to_string(hi) + ") does not fit an input of " +
                                     std::to_string(n));
    }
    Axis<float>& axis = axes[a];
    axis.inputs = n;
    axis.outputs = m;
    axis.index.resize(static_cast<size_t>(m));
    for (int64_t o = 0; o < m; ++o) {
      int64_t i = o - lo;
      if (reflect) {
        i = i < 0 ? -i : i;
        if (i >= n) i = 2 * (n - 1) - i;
      } else {
        i = std::min(std::max<int64_t>(i, 0), n - 1);
      }
      axis.index[o] = i;
    }
  }
  combine(axes, taps);
  return Status::ok();
}

Status linearTaps(const Shape& inputSpatial, const Shape& outputSpatial, bool alignCorners,
                  const std::vector<double>& scales, bool wide, Taps* taps) {
  const char* op = "upsample_linear_backward";
  DETCOLL_RETURN_IF_ERROR(spatialOf(op, inputSpatial.size()));
  const size_t rank = inputSpatial.size();
  if (outputSpatial.size() != rank || scales.size() > rank) {
    return Status::invalidArgument(
        std::string(op) + ": the input's, the output's and the scales' " + "dimensions differ");
  }
  for (size_t a = 0; a < rank; ++a) {
    if (inputSpatial[a] < 1 || outputSpatial[a] < 1) {
      return Status::invalidArgument(std::string(op) + ": a spatial size is 0 or negative");
    }
  }
  for (size_t a = 0; a < scales.size(); ++a) {
    if (std::isnan(scales[a]) ||
        (scales[a] > 0 && !std::isfinite(static_cast<float>(1.0 / scales[a])))) {
      return Status::invalidArgument(std::string(op) + ": scale factor " + showNumber(scales[a]) +
                                     " gives no finite source position");
    }
  }
  auto build = [&](auto zero) {
    using O = decltype(zero);
    std::vector<Axis<O>> axes;
    for (size_t a = 0; a < rank; ++a) {
      axes.push_back(linearAxis<O>(inputSpatial[a], outputSpatial[a], alignCorners,
                                   a < scales.size() ? scales[a] : 0.0));
    }
    combine(axes, taps);
  };
  if (wide) {
    build(0.0);
  } else {
    build(0.0f);
  }
  return Status::ok();
}

Status nearestTaps(const Shape& inputSpatial, const Shape& outputSpatial,
                   const std::vector<double>& scales, Taps* taps) {
  const char* op = "upsample_nearest_backward";
  DETCOLL_RETURN_IF_ERROR(spatialOf(op, inputSpatial.size()));
  const size_t rank = inputSpatial.size();
  if (outputSpatial.size() != rank || scales.size() > rank) {
    return Status::invalidArgument(std::string(op) +
                                   ": the input's, the output's and the scales' dimensions differ");
  }
  std::vector<Axis<float>> axes(rank);
  for (size_t a = 0; a < rank; ++a) {
    const int64_t n = inputSpatial[a], m = outputSpatial[a];
    if (n < 1 || m < 1) {
      return Status::invalidArgument(std::string(op) + ": a spatial size is 0 or negative");
    }
    const double scale = a < scales.size() ? scales[a] : 0.0;
    const float step = static_cast<float>(
        scale > 0 ? 1.0 / scale : static_cast<double>(n) / static_cast<double>(m));
    if (std::isnan(scale) || !std::isfinite(step)) {
      return Status::invalidArgument(std::string(op) + ": scale factor " + showNumber(scale) +
                                     " gives no finite source position");
    }
    Axis<float>& axis = axes[a];
    axis.inputs = n;
    axis.outputs = m;
    axis.index.resize(static_cast<size_t>(m));
    for (int64_t o = 0; o < m; ++o) {
      axis.index[o] = m == n       ? o
                      : m == 2 * n ? o / 2
                                   : nearestIndex(std::floor(static_cast<float>(o) * step), n);
    }
  }
  combine(axes, taps);
  return Status::ok();
}

Status avgPoolTaps(const Shape& inputSpatial, const AvgPool& pool, Taps* taps,
                   std::vector<int64_t>* divisors) {
  const char* op = "avg_pool_backward";
  const size_t rank = inputSpatial.size();
  if (rank < 2 || rank > 3 || pool.kernel.size() != rank || pool.stride.size() != rank ||
      pool.padding.size() != rank) {
    return Status::invalidArgument(std::string(op) + ": 2 or 3 spatial dimensions, with a " +
                                   "kernel, stride and padding for each");
  }
  std::vector<Ranges> axes(rank);
  std::vector<std::vector<int64_t>> window(rank), inside(rank);
  for (size_t a = 0; a < rank; ++a) {
    const int64_t n = inputSpatial[a], k = pool.kernel[a], st = pool.stride[a], p = pool.padding[a];
    if (n < 1 || k < 1 || st < 1 || p < 0 || 2 * p > k) {
      return Status::invalidArgument(std::string(op) + ": kernel " + std::to_string(k) +
                                     ", stride " + std::to_string(st) + " and padding " +
                                     std::to_string(p) + " are not a pooling window of " +
                                     std::to_string(n));
    }
    // torch's pooling_output_shape (dilation 1).
    int64_t m = (n + 2 * p - k + (pool.ceilMode ? st - 1 : 0)) / st + 1;
    if (pool.ceilMode && (m - 1) * st >= n + p) --m;
    if (m < 1) {
      return Status::invalidArgument(std::string(op) + ": kernel " + std::to_string(k) +
                                     " with padding " + std::to_string(p) +
                                     " is larger than the input of " + std::to_string(n));
    }
    Ranges& r = axes[a];
    r.inputs = n;
    r.lo.resize(m);
    r.hi.resize(m);
    window[a].resize(m);
    inside[a].resize(m);
    for (int64_t o = 0; o < m; ++o) {
      const int64_t start = o * st - p, end = std::min(start + k, n + p);
      window[a][o] = end - start;
      r.lo[o] = std::max<int64_t>(start, 0);
      r.hi[o] = std::max(r.lo[o], std::min(end, n));
      inside[a][o] = r.hi[o] - r.lo[o];
    }
  }
  windowTaps(axes, taps);
  divisors->assign(static_cast<size_t>(3 * taps->outputs), 1);
  std::vector<int64_t> o(rank, 0);
  for (int64_t flat = 0; flat < taps->outputs; ++flat) {
    int64_t rest = flat, padded = 1, counted = 1;
    for (size_t a = rank; a-- > 0;) {
      o[a] = rest % static_cast<int64_t>(axes[a].lo.size());
      rest /= static_cast<int64_t>(axes[a].lo.size());
    }
    for (size_t a = 0; a < rank; ++a) {
      padded *= window[a][o[a]];
      counted *= inside[a][o[a]];
    }
    (*divisors)[3 * flat] = pool.divisorOverride != 0
                                ? pool.divisorOverride
                                : std::max<int64_t>(pool.countIncludePad ? padded : counted, 1);
  }
  return Status::ok();
}

Status adaptiveAvgPoolTaps(const Shape& inputSpatial, const Shape& outputSpatial, Taps* taps,
                           std::vector<int64_t>* divisors) {
  const char* op = "adaptive_avg_pool_backward";
  const size_t rank = inputSpatial.size();
  if (rank < 2 || rank > 3 || outputSpatial.size() != rank) {
    return Status::invalidArgument(std::string(op) + ": 2 or 3 spatial dimensions, with the " +
                                   "output's");
  }
  std::vector<Ranges> axes(rank);
  for (size_t a = 0; a < rank; ++a) {
    const int64_t n = inputSpatial[a], m = outputSpatial[a];
    if (n < 1 || m < 1) {
      return Status::invalidArgument(std::string(op) + ": a spatial size is 0 or negative");
    }
    Ranges& r = axes[a];
    r.inputs = n;
    r.lo.resize(m);
    r.hi.resize(m);
    for (int64_t o = 0; o < m; ++o) {
      r.lo[o] = o * n / m;
      r.hi[o] = ((o + 1) * n + m - 1) / m;
    }
  }
  windowTaps(axes, taps);
  divisors->assign(static_cast<size_t>(3 * taps->outputs), 1);
  std::vector<int64_t> o(rank, 0);
  for (int64_t flat = 0; flat < taps->outputs; ++flat) {
    int64_t rest = flat;
    for (size_t a = rank; a-- > 0;) {
      o[a] = rest % static_cast<int64_t>(axes[a].lo.size());
      rest /= static_cast<int64_t>(axes[a].lo.size());
    }
    for (size_t a = 0; a < rank; ++a) {
      (*divisors)[3 * flat + a] = axes[a].hi[o[a]] - axes[a].lo[o[a]];
    }
  }
  return Status::ok();
}

namespace {

Status scatterTaps(const char* op, Taps& taps, void* gradInput, const void* gradOutput,
                   DataType type, int64_t planes, int threads) {
  expandTaps(&taps);
  if (planes < 0) return Status::invalidArgument(std::string(op) + ": negative size");
  const bool wide = type == DataType::kFloat64;
  if (taps.weights() != nullptr && wide != !taps.weights64.empty()) {
    return Status::internal(std::string(op) + ": taps of the other precision");
  }
  return weightedScatter(gradInput, planes, taps.inputs, type, taps.destination.data(),
                         static_cast<int64_t>(taps.destination.size()), gradOutput, taps.outputs,
                         taps.rows.empty() ? nullptr : taps.rows.data(), taps.weights(), threads)
      .prefixed(op);
}

}  // namespace

Status padBackward(void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                   const Shape& inputSpatial, const std::vector<int64_t>& padding, bool reflect,
                   int threads) {
  Taps taps;
  DETCOLL_RETURN_IF_ERROR(padTaps(inputSpatial, padding, reflect, &taps));
  return scatterTaps(reflect ? "reflection_pad_backward" : "replication_pad_backward", taps,
                     gradInput, gradOutput, type, planes, threads);
}

Status upsampleLinearBackward(void* gradInput, const void* gradOutput, DataType type,
                              int64_t planes, const Shape& inputSpatial, const Shape& outputSpatial,
                              bool alignCorners, const std::vector<double>& scales, int threads) {
  Taps taps;
  DETCOLL_RETURN_IF_ERROR(linearTaps(inputSpatial, outputSpatial, alignCorners, scales,
                                     type == DataType::kFloat64, &taps));
  return scatterTaps("upsample_linear_backward", taps, gradInput, gradOutput, type, planes,
                     threads);
}

Status upsampleNearestBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, const std::vector<double>& scales,
                               int threads) {
  Taps taps;
  DETCOLL_RETURN_IF_ERROR(nearestTaps(inputSpatial, outputSpatial, scales, &taps));
  return scatterTaps("upsample_nearest_backward", taps, gradInput, gradOutput, type, planes,
                     threads);
}

namespace {

// The shares (DivideShares over planes x outputs), then the taps' scatter.
Status scatterShares(const char* op, Taps& taps, const std::vector<int64_t>& divisors,
                     void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                     int threads) {
  if (planes < 0) return Status::invalidArgument(std::string(op) + ": negative size");
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument(std::string(op) + ": dtype " + dataTypeName(type) +
                                   "; floating point only");
  }
  std::vector<uint8_t> shares(static_cast<size_t>(planes * taps.outputs) * dataTypeSize(type));
  visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const DivideShares<T> body{static_cast<const T*>(gradOutput), divisors.data(),
                               reinterpret_cast<T*>(shares.data()), taps.outputs};
    for (int64_t t = 0; t < planes * taps.outputs; ++t) body(t);
  });
  return scatterTaps(op, taps, gradInput, shares.data(), type, planes, threads);
}

}  // namespace

Status avgPoolBackward(void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                       const Shape& inputSpatial, const AvgPool& pool, int threads) {
  Taps taps;
  std::vector<int64_t> divisors;
  DETCOLL_RETURN_IF_ERROR(avgPoolTaps(inputSpatial, pool, &taps, &divisors));
  return scatterShares("avg_pool_backward", taps, divisors, gradInput, gradOutput, type, planes,
                       threads);
}

Status adaptiveAvgPoolBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, int threads) {
  Taps taps;
  std::vector<int64_t> divisors;
  DETCOLL_RETURN_IF_ERROR(adaptiveAvgPoolTaps(inputSpatial, outputSpatial, &taps, &divisors));
  return scatterShares("adaptive_avg_pool_backward", taps, divisors, gradInput, gradOutput, type,
                       planes, threads);
}

Status maxPoolBackward(void* gradInput, const void* gradOutput, const int64_t* indices,
                       DataType type, int64_t planes, int64_t inner, int64_t outputs, int threads) {
  const char* op = "max_pool_backward";
  if (planes < 0 || inner < 0 || outputs < 0) {
    return Status::invalidArgument(std::string(op) + ": negative size");
  }
  DETCOLL_RETURN_IF_ERROR(sizesFit(op, {planes, inner}));
  DETCOLL_RETURN_IF_ERROR(sizesFit(op, {planes, outputs}));
  DETCOLL_RETURN_IF_ERROR(checkSegments(indices, planes * outputs, inner, "indices").prefixed(op));
  std::vector<int64_t> destination(static_cast<size_t>(planes * outputs));
  const PlaneOffsets body{indices, inner, outputs, destination.data()};
  for (int64_t t = 0; t < planes * outputs; ++t) body(t);
  return weightedScatter(gradInput, 1, planes * inner, type, destination.data(), planes * outputs,
                         gradOutput, planes * outputs, nullptr, nullptr, threads)
      .prefixed(op);
}

}  // namespace detcoll::kernels::ops
