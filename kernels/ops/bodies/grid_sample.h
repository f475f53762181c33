#pragma once

// grid_sample's backward (kernels/ops/grid_sample.h) on an executor. The input's gradient, batch
// element by batch element: every position's taps (GridTapBody), then the segment engine with the
// channels as its slices, the taps outside left out; the grid's gradient: one body per position,
// the CPU reference's.

#include <cstdint>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/ops/bodies/scatter.h"
#include "kernels/ops/bodies/segment.h"
#include "kernels/ops/grid_sample.h"

namespace detcoll::kernels::ops::bodies {

template <typename E>
Status gridSamplerBackward(E& e, void* gradInput, void* gradGrid, const void* gradOutput,
                           const void* input, const void* gridValues, DataType type,
                           const GridSample& s) {
  DETCOLL_RETURN_IF_ERROR(
      checkGridSample(s, type, gradInput, gradGrid, gradOutput, input, gridValues));
  const int64_t inner = s.inner();
  const int taps = gridTapCount(s);
  Status status;
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = typename kernels::Traits<T>::Acc;
    if constexpr (kernels::isFloatingStorage<T>()) {
      const T* g = static_cast<const T*>(gradOutput);
      const int64_t n = s.positions * taps;
      if (gradInput != nullptr && (n == 0 || s.channels == 0)) {
        e.launch(s.batch * s.channels * inner, FillZeroBody<T>{static_cast<T*>(gradInput)});
      } else if (gradInput != nullptr) {
        int64_t* at = e.template alloc<int64_t>(n);
        int64_t* row = e.template alloc<int64_t>(n);
        A* weight = e.template alloc<A>(n);
        for (int64_t b = 0; b < s.batch && status.isOk(); ++b) {
          e.launch(s.positions,
                   GridTapBody<T>{s, static_cast<const T*>(gridValues), b, taps, at, weight, row});
          SegmentJob job;
          job.destination = at;
          job.n = n;
          job.destinations = inner;
          job.skip.negative = true;
          job.what = "taps";
          job.values = g + b * s.channels * s.positions;
          job.type = type;
          job.rows = row;
          job.weights = weight;
          job.out = static_cast<T*>(gradInput) + b * s.channels * inner;
          job.slices = s.channels;
          job.valuesOuter = s.positions;
          job.outOuter = inner;
          status = segments(e, job);
        }
      }
      if (gradGrid != nullptr && status.isOk()) {
        e.launch(s.batch * s.positions,
                 GridGradBody<T>{s, static_cast<const T*>(gridValues), static_cast<const T*>(input),
                                 g, static_cast<T*>(gradGrid)});
      }
    }
  });
  DETCOLL_RETURN_IF_ERROR(status.prefixed("grid_sampler_backward"));
  return e.status();
}

}  // namespace detcoll::kernels::ops::bodies
