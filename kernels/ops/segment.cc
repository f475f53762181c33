#include "kernels/ops/segment.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>

#include "kernels/accumulate.h"
#include "kernels/ops/for_each_index.h"

namespace detcoll::kernels::ops {
namespace {

using kernels::Traits;
using kernels::visitType;
using kernels::wrapAdd;
using kernels::wrapMultiply;

template <typename T>
using AccOf = typename Traits<T>::Acc;

// The weight of a source, converted exactly to A.
template <typename A>
A weightAt(const void* weights, DataType type, int64_t s) {
  A w{};
  visitType(type, [&](auto tag) {
    using W = typename decltype(tag)::type;
    w = static_cast<A>(Traits<W>::load(static_cast<const W*>(weights)[s]));
  });
  return w;
}

// Destinations [first, last) of the plan, column by column within a destination row. The row's
// accumulators live in `acc` (columns entries), so each source row is read once, in order.
template <typename T>
void reduceRange(const SegmentPlan& plan, const SegmentSources& in, const SegmentOutput& out,
                 int64_t first, int64_t last) {
  using A = AccOf<T>;
  const T* values = static_cast<const T*>(in.values);
  T* result = static_cast<T*>(out.values);
  const int64_t columns = out.columns;
  const bool scaled = in.scale != 1.0;
  const A scale = static_cast<A>(in.scale);
  std::vector<A> acc(static_cast<size_t>(columns));
  for (int64_t d = first; d < last; ++d) {
    T* row = result + d * out.rowStride;
    const int64_t begin = plan.offsets[d], end = plan.offsets[d + 1];
    if (end == begin && out.init == SegmentInit::kOutput) continue;  // unchanged, bit for bit
    for (int64_t c = 0; c < columns; ++c) {
      acc[c] = out.init == SegmentInit::kOutput ? Traits<T>::load(row[c]) : A{};
    }
    for (int64_t j = begin; j < end; ++j) {
      const int64_t s = plan.order[j];
      const T* source = values + (in.rows != nullptr ? in.rows[s] : s) * in.rowStride;
      if (in.weights == nullptr && !scaled) {
        for (int64_t c = 0; c < columns; ++c) acc[c] = wrapAdd(acc[c], Traits<T>::load(source[c]));
      } else {
        A w = in.weights != nullptr ? weightAt<A>(in.weights, in.weightType, s) : A{1};
        if (scaled) w = in.weights != nullptr ? wrapMultiply(w, scale) : scale;
        for (int64_t c = 0; c < columns; ++c)
          acc[c] = wrapAdd(acc[c], wrapMultiply(w, Traits<T>::load(source[c])));
      }
    }
    if (out.mean) {
      const int64_t k = end - begin;
      for (int64_t c = 0; c < columns; ++c) {
        row[c] = k == 0 ? Traits<T>::store(A{}) : Traits<T>::store(acc[c] / static_cast<A>(k));
      }
    } else {
      for (int64_t c = 0; c < columns; ++c) row[c] = Traits<T>::store(acc[c]);
    }
  }
}

template <typename T>
void reduceAll(const SegmentPlan& plan, const SegmentSources& in, const SegmentOutput& out,
               int threads) {
  const int64_t m = plan.destinations;
  const int64_t work = static_cast<int64_t>(plan.order.size()) * out.columns + m;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Below about 64 K element operations a thread costs more than it saves.
  threads = static_cast<int>(std::min<int64_t>(threads, 1 + work / (64 << 10)));
  if (threads <= 1 || m < 2) {
    reduceRange<T>(plan, in, out, 0, m);
    return;
  }
  // Contiguous destination ranges of about equal source counts.
  std::vector<int64_t> bounds{0};
  const int64_t total = static_cast<int64_t>(plan.order.size()) + m;
  for (int t = 1; t < threads; ++t) {
    const int64_t target = total * t / threads;
    // The first destination d with offsets[d] + d >= target.
    int64_t lo = bounds.back(), hi = m;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (plan.offsets[mid] + mid >= target) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    bounds.push_back(lo);
  }
  bounds.push_back(m);
  onThreads(threads, [&](int t) { reduceRange<T>(plan, in, out, bounds[t], bounds[t + 1]); });
}

// One value a source, added in place over the whole output, rows [0, m). Where every row
// already holds its own stored form (no NaN other than the canonical one), storing every row at
// the end leaves the rows no source reaches as they were, so no row needs marking and the loop is
// the sequential one; otherwise this writes nothing and returns false. With `what` set, the
// destinations are checked a block at a time just before the block is added (so they are read
// once), and a bad one puts the output back as it was and leaves checkSegments' error in *status.
// Without `what`, the sources `skip` names are left out (the destinations were checked).
template <typename T>
bool addInPlace(const int64_t* destination, int64_t n, int64_t m, const T* values, int64_t from,
                T* result, int64_t to, const char* what, Status* status = nullptr, Skip skip = {}) {
  std::vector<T> saved(what != nullptr ? static_cast<size_t>(m) : 0);
  for (int64_t d = 0; d < m; ++d) {
    const T v = result[d * to], kept = Traits<T>::store(v);
    if (std::memcmp(&v, &kept, sizeof(T)) != 0) return false;
    if (what != nullptr) saved[d] = v;
  }
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    if (what != nullptr) {
      uint64_t bad = 0;
      for (int64_t s = start; s < end; ++s) {
        bad |= static_cast<uint64_t>(static_cast<uint64_t>(destination[s]) >=
                                     static_cast<uint64_t>(m));
      }
      if (bad != 0) {
        for (int64_t d = 0; d < m; ++d) result[d * to] = saved[d];
        *status = checkSegments(destination, n, m, what);
        return true;
      }
    }
    for (int64_t s = start; s < end; ++s) {
      if (skip(destination[s])) continue;
      T& acc = result[destination[s] * to];
      acc = wrapAdd(acc, values[s * from]);
    }
  }
  for (int64_t d = 0; d < m; ++d) result[d * to] = Traits<T>::store(result[d * to]);
  return true;
}

// The threads scatterAll uses.
int scatterThreads(int64_t n, int64_t m, int64_t columns, int threads) {
  const int64_t work = n * columns + m;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<int>(std::min<int64_t>({threads, 1 + work / (256 << 10), m}));
}

// The one-pass formulation for destinations [first, last).
template <typename T>
void scatterRange(const int64_t* destination, int64_t n, Skip skip, const SegmentSources& in,
                  const SegmentOutput& out, int64_t first, int64_t last, bool whole) {
  using A = AccOf<T>;
  constexpr bool kInPlace = std::is_same_v<T, A>;  // the output is its own accumulator
  const T* values = static_cast<const T*>(in.values);
  T* result = static_cast<T*>(out.values);
  const int64_t columns = out.columns, width = last - first;
  const bool scaled = in.scale != 1.0;
  const A scale = static_cast<A>(in.scale);
  // Counts are needed for a mean, and to leave a 16-bit output's untouched rows as they are.
  const bool counting = out.mean || !kInPlace;
  std::vector<int64_t> count(counting ? static_cast<size_t>(width) : 0, 0);
  std::vector<A> buffer(kInPlace ? 0 : static_cast<size_t>(width * columns));
  auto accumulator = [&](int64_t d) -> A* {
    if constexpr (kInPlace) {
      return result + d * out.rowStride;
    } else {
      return buffer.data() + (d - first) * columns;
    }
  };
  if (kInPlace && out.init == SegmentInit::kZero && out.rowStride == columns) {
    std::fill(result + first * columns, result + last * columns, T{});  // one contiguous fill
  } else if (!kInPlace || out.init == SegmentInit::kZero) {  // in place, kOutput: already there
    for (int64_t d = first; d < last; ++d) {
      A* acc = accumulator(d);
      const T* row = result + d * out.rowStride;
      for (int64_t c = 0; c < columns; ++c) {
        acc[c] = out.init == SegmentInit::kOutput ? Traits<T>::load(row[c]) : A{};
      }
    }
  }
  const bool oneValue =
      !counting && columns == 1 && in.rows == nullptr && in.weights == nullptr && !scaled;
  const bool plain = oneValue && !skip.value && !skip.negative;
  if constexpr (kInPlace) {
    if (oneValue && whole &&
        addInPlace(destination, n, last, values, in.rowStride, result, out.rowStride, nullptr,
                   nullptr, skip)) {
      return;
    }
  }
  // The in-place path's written rows, whose NaNs become the dtype's canonical one at the end
  // (Traits::store, as every other write here and on the device); rows no source reaches stay
  // bit for bit.
  std::vector<uint8_t> touched(kInPlace ? static_cast<size_t>(width) : 0, 0);
  auto canonical = [&]() {
    if constexpr (kInPlace) {
      for (int64_t d = first; d < last; ++d) {
        if (!touched[d - first]) continue;
        T* row = result + d * out.rowStride;
        for (int64_t c = 0; c < columns; ++c) row[c] = Traits<T>::store(row[c]);
      }
    }
  };
  if constexpr (kInPlace) {
    if (plain) {  // the one-value loop, marking the rows written
      for (int64_t s = 0; s < n; ++s) {
        const int64_t d = destination[s];
        if (d >= first && d < last) {
          A& acc = result[d * out.rowStride];
          acc = wrapAdd(acc, values[s * in.rowStride]);
          touched[d - first] = 1;
        }
      }
      canonical();
      return;
    }
  }
  for (int64_t s = 0; s < n; ++s) {
    const int64_t d = destination[s];
    if (d < first || d >= last || skip(d)) continue;
    if (counting) ++count[d - first];
    if constexpr (kInPlace) touched[d - first] = 1;
    A* acc = accumulator(d);
    const T* source = values + (in.rows != nullptr ? in.rows[s] : s) * in.rowStride;
    if (in.weights == nullptr && !scaled) {
      for (int64_t c = 0; c < columns; ++c) acc[c] = wrapAdd(acc[c], Traits<T>::load(source[c]));
    } else {
      A w = in.weights != nullptr ? weightAt<A>(in.weights, in.weightType, s) : A{1};
      if (scaled) w = in.weights != nullptr ? wrapMultiply(w, scale) : scale;
      for (int64_t c = 0; c < columns; ++c)
        acc[c] = wrapAdd(acc[c], wrapMultiply(w, Traits<T>::load(source[c])));
    }
  }
  if (!counting) {  // the output was the accumulator
    canonical();
    return;
  }
  for (int64_t d = first; d < last; ++d) {
    const int64_t k = count[d - first];
    T* row = result + d * out.rowStride;
    const A* acc = accumulator(d);
    if (k == 0 && out.init == SegmentInit::kOutput) continue;  // unchanged, bit for bit
    for (int64_t c = 0; c < columns; ++c) {
      if (out.mean) {
        row[c] = k == 0 ? Traits<T>::store(A{}) : Traits<T>::store(acc[c] / static_cast<A>(k));
      } else if constexpr (!kInPlace) {
        row[c] = Traits<T>::store(acc[c]);
      } else {
        row[c] = Traits<T>::store(row[c]);
      }
    }
  }
}

template <typename T>
void scatterAll(const int64_t* destination, int64_t n, int64_t m, Skip skip,
                const SegmentSources& in, const SegmentOutput& out, int threads) {
  threads = scatterThreads(n, m, out.columns, threads);
  if (threads <= 1) {
    scatterRange<T>(destination, n, skip, in, out, 0, m, true);
    return;
  }
  onThreads(threads, [&](int t) {
    scatterRange<T>(destination, n, skip, in, out, m * t / threads, m * (t + 1) / threads, false);
  });
}

}  // namespace

Status scatterReduce(const int64_t* destination, int64_t n, int64_t destinations, Skip skip,
                     const SegmentSources& in, const SegmentOutput& out, int threads) {
  if (destinations > 0 && out.columns > 0 && out.values == nullptr) {
    return Status::invalidArgument("the output is null");
  }
  if (n > 0 && out.columns > 0 && in.values == nullptr) {
    return Status::invalidArgument("the source values are null");
  }
  if (out.columns == 0 || destinations == 0) return Status::ok();  // nothing to write
  visitType(in.type, [&](auto tag) {
    scatterAll<typename decltype(tag)::type>(destination, n, destinations, skip, in, out, threads);
  });
  return Status::ok();
}

Status checkAndScatter(const int64_t* destination, int64_t n, int64_t destinations,
                       const char* what, const SegmentSources& in, const SegmentOutput& out,
                       int threads) {
  const bool plain = out.columns == 1 && out.init == SegmentInit::kOutput && !out.mean &&
                     in.rows == nullptr && in.weights == nullptr && in.scale == 1.0;
  // One pass pays where the output (copied to undo) is small beside the destinations.
  if (plain && n > 0 && destinations > 0 && destination != nullptr && in.values != nullptr &&
      out.values != nullptr && destinations * 4 <= n &&
      scatterThreads(n, destinations, 1, threads) <= 1) {
    Status status;
    bool done = false;
    visitType(in.type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, AccOf<T>>) {
        done = addInPlace(destination, n, destinations, static_cast<const T*>(in.values),
                          in.rowStride, static_cast<T*>(out.values), out.rowStride, what, &status);
      }
    });
    if (done) return status;
  }
  DETCOLL_RETURN_IF_ERROR(checkSegments(destination, n, destinations, what));
  return scatterReduce(destination, n, destinations, Skip{}, in, out, threads);
}

Status outOfRange(const char* what, int64_t at, int64_t value, int64_t destinations) {
  return Status::invalidArgument(std::string(what) + "[" + std::to_string(at) +
                                 "] = " + std::to_string(value) + " is out of range [0, " +
                                 std::to_string(destinations) + ")");
}

Status checkSegments(const int64_t* destination, int64_t n, int64_t destinations, const char* what,
                     Skip skip) {
  if (n < 0 || destinations < 0) {
    return Status::invalidArgument(std::string(what) + ": negative size");
  }
  if (n > 0 && destination == nullptr) {
    return Status::invalidArgument(std::string(what) + " is null");
  }
  for (int64_t s = 0; s < n; ++s) {
    const int64_t d = destination[s];
    if (skip(d)) continue;
    if (d < 0 || d >= destinations) return outOfRange(what, s, d, destinations);
  }
  return Status::ok();
}

Status planSegments(const int64_t* destination, int64_t n, int64_t destinations, const char* what,
                    SegmentPlan* plan, Skip skip) {
  DETCOLL_RETURN_IF_ERROR(checkSegments(destination, n, destinations, what, skip));
  plan->destinations = destinations;
  plan->offsets.assign(static_cast<size_t>(destinations) + 1, 0);
  for (int64_t s = 0; s < n; ++s) {
    if (!skip(destination[s])) ++plan->offsets[destination[s] + 1];
  }
  for (int64_t d = 0; d < destinations; ++d) plan->offsets[d + 1] += plan->offsets[d];
  plan->order.assign(static_cast<size_t>(plan->offsets[destinations]), 0);
  std::vector<int64_t> next(plan->offsets.begin(), plan->offsets.end() - 1);
  for (int64_t s = 0; s < n; ++s) {
    if (!skip(destination[s])) plan->order[next[destination[s]]++] = s;
  }
  return Status::ok();
}

Status reduceSegments(const SegmentPlan& plan, const SegmentSources& in, const SegmentOutput& out,
                      int threads) {
  if (plan.destinations > 0 && out.columns > 0 && out.values == nullptr) {
    return Status::invalidArgument("the output is null");
  }
  if (!plan.order.empty() && out.columns > 0 && in.values == nullptr) {
    return Status::invalidArgument("the source values are null");
  }
  if (out.columns == 0 || plan.destinations == 0) return Status::ok();  // nothing to write
  visitType(in.type,
            [&](auto tag) { reduceAll<typename decltype(tag)::type>(plan, in, out, threads); });
  return Status::ok();
}

}  // namespace detcoll::kernels::ops
