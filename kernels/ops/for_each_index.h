#pragma once

// A body run over every index in [0, n) on host threads (or a range function over pieces of it):
// how the CPU reference (resample.cc) runs the per-pixel bodies of resample_kernels.h. Contiguous
// ranges go to up to `threads` threads
// (<= 0: the hardware's), none with fewer than `grain` indices; each index is computed by one
// call, so the bits never depend on the split. (The tests' serial executor, which runs the GPU
// formulation of bodies/ one index at a time, is tests/support/serial_executor.h.)

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace detcoll::kernels::ops {

// range(first, last) over contiguous pieces of [0, n), one per thread: up to `threads` threads
// (<= 0: the hardware's), at most `most` of them.
template <typename Range>
void forEachRange(int64_t n, int threads, int64_t most, const Range& range) {
  if (n <= 0) return;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>({threads, std::max<int64_t>(1, most), n}));
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t)
    workers.emplace_back(range, n * t / threads, n * (t + 1) / threads);
  range(0, n / threads);
  for (std::thread& w : workers) w.join();
}

template <typename Body>
void forEachIndex(int64_t n, int threads, int64_t grain, const Body& body) {
  forEachRange(n, threads, n / grain, [&body](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) body(i);
  });
}

}  // namespace detcoll::kernels::ops
