#pragma once

// What every GPU test shares: whether a device is present, and the skip that says so.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace detcoll::testing {

inline bool haveDevice() {
  int devices = 0;
  const bool found = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  (void)cudaGetLastError();
  return found;
}

}  // namespace detcoll::testing

// Skips the test, naming what is compiled but not run, when there is no device.
#define DETCOLL_SKIP_WITHOUT_GPU(what)   \
  if (!::detcoll::testing::haveDevice()) \
  GTEST_SKIP() << "no CUDA device: " what " compiled but not run here"
