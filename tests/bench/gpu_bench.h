#pragma once

// What the GPU benchmarks (tests/bench/ops_gpu_perf.cu, reduce_gpu_perf.cu) share: stopping with
// exit status 2 on a CUDA failure, a failed call or a bad argument; their "-x VALUE" options; the
// device, or its absence, named the way scripts/device_check.sh reads it ("device: NAME, ..." or
// "no CUDA device: ..."); copies back to the host; and the median time of repeated calls measured
// with CUDA events. Header-only: the benchmarks are also compiled by scripts/device_check.sh with
// nvcc alone.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

// Stops the benchmark (exit status 2), naming the call, when a CUDA call fails.
#define CUDA_CHECK(call)                                                      \
  do {                                                                        \
    const cudaError_t e_ = (call);                                            \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(::detcoll::bench::kFailureExit);                              \
    }                                                                         \
  } while (0)

namespace detcoll::bench {

// The exit status of a CUDA failure, a failed call or a bad argument.
constexpr int kFailureExit = 2;

// Stops the benchmark when a call failed.
inline void mustBeOk(const Status& s) {
  if (!s.isOk()) {
    std::fprintf(stderr, "%s\n", s.toString().c_str());
    std::exit(kFailureExit);
  }
}

// ---- options --------------------------------------------------------------------------------

// An option "-x VALUE": set takes VALUE and returns whether it is valid.
struct Option {
  const char* flag;
  std::function<bool(const char*)> set;
};

// Takes argv[1..] as "-x VALUE" pairs of `options`. On an unknown option, a missing value or one
// that its option refuses, prints "usage: PROGRAM USAGE" and returns false.
inline bool parseOptions(int argc, char** argv, const std::vector<Option>& options,
                         const char* usage) {
  for (int i = 1; i < argc; i += 2) {
    const auto option = std::find_if(options.begin(), options.end(), [&](const Option& o) {
      return std::strcmp(o.flag, argv[i]) == 0;
    });
    if (option == options.end() || i + 1 >= argc || !option->set(argv[i + 1])) {
      std::fprintf(stderr, "usage: %s %s\n", argv[0], usage);
      return false;
    }
  }
  return true;
}

// A whole number of at least `min` into *out.
inline std::function<bool(const char*)> intAtLeast(int* out, int min) {
  return [out, min](const char* text) {
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || v < min || v > 1000000000) return false;
    *out = static_cast<int>(v);
    return true;
  };
}

// A size in bytes, not 0: a whole number, a K, M or G suffix multiplying it by 2^10, 2^20, 2^30.
inline bool parseBytes(const char* text, size_t* bytes) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text) return false;
  size_t scale = 1;
  if (*end == 'K' || *end == 'k') scale = size_t{1} << 10, ++end;
  if (*end == 'M' || *end == 'm') scale = size_t{1} << 20, ++end;
  if (*end == 'G' || *end == 'g') scale = size_t{1} << 30, ++end;
  if (*end != '\0' || v == 0) return false;
  *bytes = static_cast<size_t>(v) * scale;
  return true;
}

// ---- the device -----------------------------------------------------------------------------

// Whether there is a CUDA device; where there is none, says so (the benchmark then measures
// nothing and exits 0).
inline bool haveDevice() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return false;
  }
  return true;
}

// The name of device 0.
inline std::string deviceName() {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return prop.name;
}

// `bytes` of device memory at p, copied to the host.
inline std::vector<uint8_t> download(const void* p, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  CUDA_CHECK(cudaMemcpy(v.data(), p, bytes, cudaMemcpyDeviceToHost));
  return v;
}

// ---- timing ---------------------------------------------------------------------------------

// Median milliseconds of `repeats` timed calls of run on `stream` (CUDA events around each
// call), after `warmups` calls; reset, where given, runs before every call, outside the timing.
inline double medianMs(const std::function<void()>& run, cudaStream_t stream, int repeats,
                       int warmups, const std::function<void()>& reset = nullptr) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int w = 0; w < warmups; ++w) {
    if (reset) reset();
    run();
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> times;
  for (int r = 0; r < repeats; ++r) {
    if (reset) reset();
    CUDA_CHECK(cudaEventRecord(start, stream));
    run();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace detcoll::bench
