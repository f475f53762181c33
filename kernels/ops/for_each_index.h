#pragma once

// A body run over every index in [0, n) on host threads: how the CPU reference (resample.cc) runs
// the per-pixel bodies of resample_kernels.h. Contiguous ranges go to up to `threads` threads
// (<= 0: the hardware's), none with fewer than `grain` indices; each index is computed by one
// call, so the bits never depend on the split. (The tests' serial executor, which runs the GPU
// formulation of bodies/ one index at a time, is tests/support/serial_executor.h.)

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace detcoll::kernels::ops {

template <typename Body>
void forEachIndex(int64_t n, int threads, int64_t grain, const Body& body) {
  if (n <= 0) return;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(1, n / grain)));
  auto range = [&body](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) body(i);
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t)
    workers.emplace_back(range, n * t / threads, n * (t + 1) / threads);
  range(0, n / threads);
  for (std::thread& w : workers) w.join();
}

}  // namespace detcoll::kernels::ops
