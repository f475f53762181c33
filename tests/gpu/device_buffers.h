#pragma once

// What the allreduce-kernel GPU tests share beside tests/support/wide_bits.h (the data, where the
// buffers lie, the comparisons): device buffers placed at a 16-byte boundary or one element past
// it between guard bytes.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/support/wide_bits.h"

namespace detcoll::testing {

// A device buffer of `bytes` at a 256-byte boundary plus `shift` bytes, between guard bytes that
// must keep kSentinel. CUDA failures are recorded (ok(), error()) and fail the test.
class DeviceSlab {
 public:
  static constexpr size_t kGuard = 256;

  DeviceSlab(size_t bytes, size_t shift)
      : bytes_(bytes), shift_(shift), total_(kGuard + shift + bytes + kGuard) {
    void* p = nullptr;
    note(cudaMalloc(&p, total_), "cudaMalloc");
    base_ = static_cast<unsigned char*>(p);
    if (ok()) note(cudaMemset(base_, kSentinel, total_), "cudaMemset");
    if (ok()) note(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  DeviceSlab(const Buffer& contents, size_t shift) : DeviceSlab(contents.size(), shift) {
    upload(contents);
  }
  ~DeviceSlab() {
    if (base_ != nullptr) cudaFree(base_);
  }
  DeviceSlab(const DeviceSlab&) = delete;
  DeviceSlab& operator=(const DeviceSlab&) = delete;

  void* data() const { return base_ == nullptr ? nullptr : base_ + kGuard + shift_; }
  size_t bytes() const { return bytes_; }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  void upload(const Buffer& contents) {
    if (ok() && !contents.empty()) {
      note(cudaMemcpy(data(), contents.data(), contents.size(), cudaMemcpyHostToDevice),
           "cudaMemcpy to the device");
      // A copy from pageable memory may return before its DMA ends: wait for it, so that a
      // kernel on any stream sees the data.
      if (ok()) note(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
  }
  // The buffer's bytes, after every kernel enqueued so far (their failures are recorded).
  Buffer contents() {
    Buffer out(bytes_);
    if (ok()) note(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (ok() && bytes_ > 0) {
      note(cudaMemcpy(out.data(), data(), bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    }
    return out;
  }
  // Whether the bytes before and after the buffer are still the sentinel.
  ::testing::AssertionResult guardsIntact() {
    Buffer all(total_);
    if (ok()) note(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (ok()) note(cudaMemcpy(all.data(), base_, total_, cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (!ok()) return ::testing::AssertionFailure() << error_;
    const size_t begin = kGuard + shift_, end = begin + bytes_;
    for (size_t i = 0; i < total_; ++i) {
      if ((i < begin || i >= end) && all[i] != kSentinel) {
        return ::testing::AssertionFailure()
               << "a kernel wrote outside its buffer: byte " << static_cast<long>(i - begin)
               << " relative to the buffer's first byte (buffer of " << bytes_ << " bytes)";
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  void note(cudaError_t e, const char* what) {
    if (e != cudaSuccess && error_.empty())
      error_ = std::string(what) + ": " + cudaGetErrorString(e);
  }

  unsigned char* base_ = nullptr;
  size_t bytes_;
  size_t shift_;
  size_t total_;
  std::string error_;
};

}  // namespace detcoll::testing
