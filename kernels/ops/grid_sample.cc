#include "kernels/ops/grid_sample.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/ops/for_each_index.h"
#include "kernels/ops/op_checks.h"

namespace detcoll::kernels::ops {

Status checkGridSample(const GridSample& g, DataType type, const void* gradInput,
                       const void* gradGrid, const void* gradOutput, const void* input,
                       const void* grid) {
  const std::string op = "grid_sampler_backward: ";
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument(op + "dtype " + dataTypeName(type) + "; floating point only");
  }
  const int mode = static_cast<int>(g.mode), padding = static_cast<int>(g.padding);
  if (mode < 0 || mode > 2) {
    return Status::invalidArgument(op + "interpolation_mode " + std::to_string(mode) +
                                   "; 0 (bilinear), 1 (nearest) or 2 (bicubic, 2-D)");
  }
  if (padding < 0 || padding > 2) {
    return Status::invalidArgument(op + "padding_mode " + std::to_string(padding) +
                                   "; 0 (zeros), 1 (border) or 2 (reflection)");
  }
  if (g.spatial != 2 && g.spatial != 3) {
    return Status::invalidArgument(op + std::to_string(g.spatial) + " spatial dimensions; 2 or 3");
  }
  if (g.mode == GridMode::kBicubic && g.spatial != 2) {
    return Status::invalidArgument(op + "bicubic interpolation is 2-D only");
  }
  bool negative = g.batch < 0 || g.channels < 0 || g.positions < 0;
  for (int a = 0; a < g.spatial; ++a) negative = negative || g.sizes[a] < 0;
  if (negative) return Status::invalidArgument(op + "negative size");
  DETCOLL_RETURN_IF_ERROR(
      sizesFit("grid_sampler_backward", {g.batch, g.channels, g.sizes[0], g.sizes[1], g.sizes[2]}));
  DETCOLL_RETURN_IF_ERROR(sizesFit("grid_sampler_backward", {g.batch, g.channels, g.positions}));
  DETCOLL_RETURN_IF_ERROR(sizesFit("grid_sampler_backward", {g.batch, g.positions, 16}));
  const bool reads = g.batch * g.positions > 0;
  if (reads && ((g.channels > 0 && gradOutput == nullptr) || grid == nullptr ||
                (g.channels * g.inner() > 0 && input == nullptr))) {
    return Status::invalidArgument(op + "grad_output, input or grid is null");
  }
  (void)gradInput;
  (void)gradGrid;
  return Status::ok();
}

Status gridSamplerBackward(void* gradInput, void* gradGrid, const void* gradOutput,
                           const void* input, const void* gridValues, DataType type,
                           const GridSample& s, int threads) {
  DETCOLL_RETURN_IF_ERROR(
      checkGridSample(s, type, gradInput, gradGrid, gradOutput, input, gridValues));
  const int64_t inner = s.inner(), taps = gridTapCount(s);
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = typename Traits<T>::Acc;
    if constexpr (isFloatingStorage<T>()) {
      const T* g = static_cast<const T*>(gradOutput);
      if (gradInput != nullptr) {
        std::vector<int64_t> at(static_cast<size_t>(s.positions * taps)), row(at.size());
        std::vector<A> weight(at.size());
        for (int64_t b = 0; b < s.batch; ++b) {
          const GridTapBody<T> tap{s,         static_cast<const T*>(gridValues),
                                   b,         static_cast<int>(taps),
                                   at.data(), weight.data(),
                                   row.data()};
          for (int64_t p = 0; p < s.positions; ++p) tap(p);
          forEachRange(s.channels, threads, 1 + s.channels * s.positions * taps / (64 << 10),
                       [&](int64_t first, int64_t last) {
                         std::vector<A> acc(static_cast<size_t>(inner));
                         for (int64_t c = first; c < last; ++c) {
                           std::fill(acc.begin(), acc.end(), A(0));
                           const T* up = g + (b * s.channels + c) * s.positions;
                           for (size_t j = 0; j < at.size(); ++j) {
                             if (at[j] < 0) continue;
                             acc[at[j]] = acc[at[j]] + weight[j] * Traits<T>::load(up[row[j]]);
                           }
                           T* out = static_cast<T*>(gradInput) + (b * s.channels + c) * inner;
                           for (int64_t i = 0; i < inner; ++i) out[i] = Traits<T>::store(acc[i]);
                         }
                       });
        }
      }
      if (gradGrid != nullptr) {
        const GridGradBody<T> body{s, static_cast<const T*>(gridValues),
                                   static_cast<const T*>(input), g, static_cast<T*>(gradGrid)};
        forEachIndex(s.batch * s.positions, threads, 256, body);
      }
    }
  });
  return Status::ok();
}

}  // namespace detcoll::kernels::ops
