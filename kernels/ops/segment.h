#pragma once

// The engine of the deterministic scatter family (scatter_add, index_add, unsorted_segment_sum
// and _mean, embedding and embedding_bag backward, weighted bincount): a stable sort of the
// sources by destination, then a fixed-order reduction of each destination's sources.
//
// The bits, for every op built on it: destination d, column c, with s_1 < s_2 < ... < s_k the
// source positions whose destination is d (in the order the op numbers its sources),
//
//   acc = init(d, c)                       (the output's value, or 0)
//   acc = acc + w(s_j) * v(s_j, c)          for j = 1 .. k, left to right
//   out(d, c) = round(acc)                  (or round(acc / k) for a mean; 0 when k = 0)
//
// computed in the accumulation type: float for float32, float16 and bfloat16 (each value
// converted exactly, one rounding at the end), double for float64, int64 for int32 and int64
// (two's complement wrap). The product w * v is formed only when there is a weight, in the
// accumulation type. Nothing depends on the number of threads or on how destinations are split:
// each destination is reduced by one thread, in that order.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::kernels::ops {

// Sources grouped by destination, in source order: order[offsets[d] .. offsets[d + 1]) are the
// positions of destination d's sources, increasing.
struct SegmentPlan {
  int64_t destinations = 0;
  std::vector<int64_t> offsets;  // destinations + 1
  std::vector<int64_t> order;    // one per source that has a destination
};

// Entries that have no destination: one value (a padding index), or every negative one (as
// TensorFlow's unsorted_segment_sum drops negative ids).
struct Skip {
  bool value = false;
  int64_t which = 0;
  bool negative = false;
  bool operator()(int64_t d) const { return (value && d == which) || (negative && d < 0); }
};

// A stable counting sort of destination[0 .. n) into [0, destinations). An entry that `skip`
// names has no destination; any other entry outside the range is an error naming its position
// and value. `what` names the indices in messages ("index").
Status planSegments(const int64_t* destination, int64_t n, int64_t destinations, const char* what,
                    SegmentPlan* plan, Skip skip = {});

// The error of destination[at] = value outside [0, destinations), `what` naming the array.
Status outOfRange(const char* what, int64_t at, int64_t value, int64_t destinations);

// The range checks of planSegments alone.
Status checkSegments(const int64_t* destination, int64_t n, int64_t destinations, const char* what,
                     Skip skip = {});

enum class SegmentInit { kZero, kOutput };

// What the reduction reads: the value of source s at column c is values[row(s) * rowStride + c],
// with row(s) = rows ? rows[s] : s, times weights[s] (converted exactly to the accumulation type)
// when weights is set, times scale when scale != 1.
struct SegmentSources {
  const void* values = nullptr;
  DataType type = DataType::kFloat32;
  int64_t rowStride = 0;  // in elements
  const int64_t* rows = nullptr;
  const void* weights = nullptr;
  DataType weightType = DataType::kFloat32;
  double scale = 1.0;  // index_add's alpha, converted to the accumulation type
};

struct SegmentOutput {
  void* values = nullptr;  // destinations x columns, rows rowStride apart
  int64_t rowStride = 0;
  int64_t columns = 1;
  SegmentInit init = SegmentInit::kZero;
  bool mean = false;
};

// Reduces plan's destinations into out: the sorted formulation (that of a GPU, where each
// destination's run of sources is reduced by its own threads). threads <= 0 uses the hardware's;
// the bits do not depend on it.
Status reduceSegments(const SegmentPlan& plan, const SegmentSources& in, const SegmentOutput& out,
                      int threads);

// The same bits in one pass over the sources in order, each added to its destination's
// accumulator (the output itself where the dtype is its own accumulation type): the CPU's
// formulation, with no sort and sequential reads of the sources. Threads split the destinations
// and each scans every source. destination[] must have passed checkSegments.
Status scatterReduce(const int64_t* destination, int64_t n, int64_t destinations, Skip skip,
                     const SegmentSources& in, const SegmentOutput& out, int threads);

// checkSegments (no skip), then scatterReduce: the same bits and the same error, the output
// unchanged on an error. Where each source is one value added in place to a small output on one
// thread, in one pass over the destinations, each block checked just before it is added.
Status checkAndScatter(const int64_t* destination, int64_t n, int64_t destinations,
                       const char* what, const SegmentSources& in, const SegmentOutput& out,
                       int threads);

}  // namespace detcoll::kernels::ops
