#pragma once

// What every GPU test shares: whether a device is present, the skip that says so, and device
// copies of host vectors.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace detcoll::testing {

inline bool haveDevice() {
  int devices = 0;
  const bool found = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  (void)cudaGetLastError();
  return found;
}

// A device copy of a host vector, freed at scope exit.
class Device {
 public:
  template <typename T>
  explicit Device(const std::vector<T>& host) : bytes_(host.size() * sizeof(T)) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(bytes_, 1)), cudaSuccess);
    if (bytes_ > 0)
      EXPECT_EQ(cudaMemcpy(p_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Device() { cudaFree(p_); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  void* get() const { return p_; }
  int64_t* ints() const { return static_cast<int64_t*>(p_); }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out(bytes_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (bytes_ > 0)
      EXPECT_EQ(cudaMemcpy(out.data(), p_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  std::vector<int64_t> int64s() const {
    const std::vector<uint8_t> b = bytes();
    std::vector<int64_t> v(b.size() / 8);
    std::memcpy(v.data(), b.data(), b.size());
    return v;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

}  // namespace detcoll::testing

// Skips the test, naming what is compiled but not run, when there is no device.
#define DETCOLL_SKIP_WITHOUT_GPU(what)   \
  if (!::detcoll::testing::haveDevice()) \
  GTEST_SKIP() << "no CUDA device: " what " compiled but not run here"
