#pragma once

// A body run over every index in [0, n) on host threads (or a range function over pieces of it):
// how the CPU reference (resample.cc) runs the per-pixel bodies of resample_kernels.h. Contiguous
// ranges go to up to `threads` threads
// (<= 0: the hardware's), none with fewer than `grain` indices; each index is computed by one
// call, so the bits never depend on the split. (The tests' serial executor, which runs the GPU
// formulation of bodies/ one index at a time, is tests/support/serial_executor.h.)

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace detcoll::kernels::ops {

// work(t) for t in [0, threads): t = 0 on the calling thread, the others on threads of their own.
// Every thread is joined before this returns or throws; an exception on any of them (an
// allocation that fails on a worker) is rethrown on the caller, the lowest t's, so that the C
// entries turn it into a status instead of the process ending.
template <typename Work>
void onThreads(int threads, const Work& work) {
  threads = std::max(threads, 1);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  auto guarded = [&work, &errors](int t) {
    try {
      work(t);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  try {
    for (int t = 1; t < threads; ++t) workers.emplace_back(guarded, t);
  } catch (...) {  // a thread that could not start: the started ones finish first
    for (std::thread& w : workers) w.join();
    throw;
  }
  guarded(0);
  for (std::thread& w : workers) w.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// range(first, last) over contiguous pieces of [0, n), one per thread: up to `threads` threads
// (<= 0: the hardware's), at most `most` of them.
template <typename Range>
void forEachRange(int64_t n, int threads, int64_t most, const Range& range) {
  if (n <= 0) return;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>({threads, std::max<int64_t>(1, most), n}));
  onThreads(threads, [&](int t) { range(n * t / threads, n * (t + 1) / threads); });
}

template <typename Body>
void forEachIndex(int64_t n, int threads, int64_t grain, const Body& body) {
  forEachRange(n, threads, n / grain, [&body](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) body(i);
  });
}

}  // namespace detcoll::kernels::ops
