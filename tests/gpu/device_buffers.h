#pragma once

// What the allreduce-kernel GPU tests share: device buffers placed at a 16-byte boundary or one
// element past it between guard bytes, random leaves over the whole exponent range of a dtype
// (zeros, -0, subnormals and, on request, infinities and NaNs), integer-valued leaves, and bit
// comparisons that name the first differing element.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "tests/support/reference.h"

namespace detcoll::testing {

using Buffer = std::vector<uint8_t>;

// Fill of the guard bytes around a device buffer.
constexpr uint8_t kDeviceSentinel = 0xa5;

inline bool isFloatType(DataType type) {
  return type != DataType::kInt32 && type != DataType::kInt64;
}

// A device buffer of `bytes` at a 256-byte boundary plus `shift` bytes, between guard bytes that
// must keep kDeviceSentinel. CUDA failures are recorded (ok(), error()) and fail the test.
class DeviceSlab {
 public:
  static constexpr size_t kGuard = 256;

  DeviceSlab(size_t bytes, size_t shift)
      : bytes_(bytes), shift_(shift), total_(kGuard + shift + bytes + kGuard) {
    void* p = nullptr;
    note(cudaMalloc(&p, total_), "cudaMalloc");
    base_ = static_cast<unsigned char*>(p);
    if (ok()) note(cudaMemset(base_, kDeviceSentinel, total_), "cudaMemset");
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
      if ((i < begin || i >= end) && all[i] != kDeviceSentinel) {
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

// Bit equality of count elements with the first differing element described.
inline ::testing::AssertionResult sameBits(const void* got, const void* want, size_t count,
                                           DataType type) {
  const long i = firstDifference(got, want, count, type);
  if (i < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << dataTypeName(type) << " element " << i << " of " << count << ": GPU "
         << describeElement(got, static_cast<size_t>(i), type) << ", CPU reference "
         << describeElement(want, static_cast<size_t>(i), type);
}

// Element-wise equality of integer arrays (keys, int64 sums), first difference named.
template <typename T>
::testing::AssertionResult sameValues(const T* got, const T* want, size_t n, const char* what) {
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure()
             << what << " element " << i << " of " << n << ": GPU " << +got[i] << " (0x" << std::hex
             << +got[i] << std::dec << "), CPU reference " << +want[i] << " (0x" << std::hex
             << +want[i] << std::dec << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// The bit layout of a float dtype, written here rather than taken from the codec under test.
struct FloatLayout {
  int mantissaBits;
  int exponentBits;
};

inline FloatLayout floatLayoutOf(DataType type) {
  switch (type) {
    case DataType::kFloat64:
      return {52, 11};
    case DataType::kFloat16:
      return {10, 5};
    case DataType::kBFloat16:
      return {7, 8};
    default:
      return {23, 8};
  }
}

inline void storeElementBits(void* data, size_t i, size_t es, uint64_t bits) {
  std::memcpy(static_cast<char*>(data) + i * es, &bits, es);  // little endian: the low bytes
}

// n leaves of count elements, raw dtype bits. Floats: per element, most leaves cluster within
// mantissaBits + 8 binades below an exponent drawn over the whole finite range (so that they
// overlap on the invariant grid and sums round), some elements draw every leaf's exponent over
// the whole range; random fraction bits (non-integers) and signs; about 2.5% +0, 1.5% -0 and 2%
// subnormals besides those the low exponents give; with `specials`, about 2% each of +inf, -inf
// and NaN (random sign and payload). Integers: the full range (sums wrap) and small values.
inline std::vector<Buffer> wideLeaves(DataType type, int n, size_t count, uint64_t seed,
                                      bool specials) {
  std::mt19937_64 g(seed * 0x9e3779b97f4a7c15ull + 20261121);
  const size_t es = dataTypeSize(type);
  std::vector<Buffer> leaves(n, Buffer(count * es));
  if (!isFloatType(type)) {
    std::uniform_int_distribution<int64_t> small(-1000, 1000);
    for (Buffer& leaf : leaves) {
      for (size_t i = 0; i < count; ++i) {
        int64_t v = static_cast<int64_t>(g());
        if (g() % 5 == 0) v = small(g);
        storeElementBits(leaf.data(), i, es, static_cast<uint64_t>(v));
      }
    }
    return leaves;
  }
  const FloatLayout f = floatLayoutOf(type);
  const int maxExponent = (1 << f.exponentBits) - 2;  // the largest finite biased exponent
  const int spread = f.mantissaBits + 8;
  const uint64_t fractionMask = (uint64_t{1} << f.mantissaBits) - 1;
  const uint64_t signBit = uint64_t{1} << (f.mantissaBits + f.exponentBits);
  const uint64_t allOnes = static_cast<uint64_t>(maxExponent + 1) << f.mantissaBits;
  std::uniform_int_distribution<int> center(1, maxExponent);
  std::uniform_int_distribution<int> below(0, spread);
  for (size_t i = 0; i < count; ++i) {
    const bool clustered = g() % 100 < 85;
    const int c = center(g);
    for (Buffer& leaf : leaves) {
      const uint64_t r = g();
      const unsigned u = static_cast<unsigned>(r % 1000);
      const uint64_t sign = ((r >> 20) & 1) ? signBit : 0;
      const uint64_t fraction = (r >> 21) & fractionMask;
      uint64_t bits;
      if (u < 25) {
        bits = 0;
      } else if (u < 40) {
        bits = signBit;
      } else if (u < 60) {
        bits = sign | (fraction | 1);  // subnormal
      } else if (specials && u < 80) {
        bits = allOnes;
      } else if (specials && u < 100) {
        bits = signBit | allOnes;
      } else if (specials && u < 120) {
        bits = sign | allOnes | (fraction | 1);  // NaN, any payload
      } else {
        int e = clustered ? c - below(g) : center(g);
        if (e < 0) e = 0;  // subnormal (or zero, if the fraction is)
        // 43 more random bits for float64's fraction than r has left.
        const uint64_t more = f.mantissaBits > 43 ? (g() & fractionMask) : fraction;
        bits = sign | (static_cast<uint64_t>(e) << f.mantissaBits) | more;
      }
      storeElementBits(leaf.data(), i, es, bits);
    }
  }
  return leaves;
}

// The dtype bits of the integer v (exact: |v| < 2^(mantissa bits + 1) for the float dtypes).
inline uint64_t integerBits(DataType type, int64_t v) {
  if (!isFloatType(type)) return static_cast<uint64_t>(v);
  if (v == 0) return 0;
  const FloatLayout f = floatLayoutOf(type);
  const uint64_t magnitude = static_cast<uint64_t>(v < 0 ? -v : v);
  const int e = 63 - __builtin_clzll(magnitude);
  const int bias = (1 << (f.exponentBits - 1)) - 1;
  const uint64_t fraction =
      (magnitude << (f.mantissaBits - e)) & ((uint64_t{1} << f.mantissaBits) - 1);
  const uint64_t sign = v < 0 ? uint64_t{1} << (f.mantissaBits + f.exponentBits) : 0;
  return sign | (static_cast<uint64_t>(e + bias) << f.mantissaBits) | fraction;
}

// n leaves of count integers drawn from [-range, range], as dtype values.
inline std::vector<Buffer> integerLeaves(DataType type, int n, size_t count, uint64_t seed,
                                         int64_t range) {
  std::mt19937_64 g(seed * 0x2545f4914f6cdd1dull + 7);
  std::uniform_int_distribution<int64_t> pick(-range, range);
  const size_t es = dataTypeSize(type);
  std::vector<Buffer> leaves(n, Buffer(count * es));
  for (Buffer& leaf : leaves) {
    for (size_t i = 0; i < count; ++i)
      storeElementBits(leaf.data(), i, es, integerBits(type, pick(g)));
  }
  return leaves;
}

inline std::vector<const void*> pointersOf(const std::vector<Buffer>& buffers) {
  std::vector<const void*> out;
  for (const Buffer& b : buffers) out.push_back(b.data());
  return out;
}

}  // namespace detcoll::testing
