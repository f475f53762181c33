// The CUDA fills against the CPU fills, bit for bit: every distribution and dtype, ranges that
// start and end inside Philox blocks, through kernels::rng::fillDevice and through the C API with
// a device pointer. Skips, saying so, when no GPU is present.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "bindings/c/detcoll.h"
#include "kernels/rng/fill.h"
#include "kernels/rng/fill_cuda.h"

#include "tests/gpu/gpu_test.h"

namespace detcoll::kernels::rng {
namespace {

struct Case {
  FillSpec spec;
  std::string label;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  auto add = [&](Distribution d, DataType t, const std::string& label) {
    FillSpec spec;
    spec.distribution = d;
    spec.type = t;
    spec.mean = -0.75;
    spec.stddev = 2.5;
    spec.p = 0.3;
    spec.n = t == DataType::kInt32 ? 1000003 : 0x5555555555555555ull;
    all.push_back({spec, label + " " + dataTypeName(t)});
  };
  for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
    add(Distribution::kUniform, t, "uniform");
    add(Distribution::kNormal, t, "normal");
  }
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                     DataType::kBFloat16, DataType::kInt32, DataType::kInt64}) {
    add(Distribution::kBernoulli, t, "bernoulli");
  }
  add(Distribution::kRandint, DataType::kInt32, "randint");
  add(Distribution::kRandint, DataType::kInt64, "randint");
  return all;
}

// The device fill of [offset, offset + count), copied back.
std::vector<uint8_t> deviceFill(const Key& key, const FillSpec& spec, uint64_t offset, size_t count,
                                bool throughCApi) {
  const size_t bytes = count * dataTypeSize(spec.type);
  void* device = nullptr;
  EXPECT_EQ(cudaMalloc(&device, bytes + 1), cudaSuccess);
  if (throughCApi) {
    const detcoll_rng_key_t k{{key.w[0], key.w[1], key.w[2], key.w[3]}};
    const auto dtype = static_cast<detcoll_dtype_t>(spec.type);
    detcoll_status_t s = DETCOLL_ERR_INTERNAL;
    switch (spec.distribution) {
      case Distribution::kUniform:
        s = detcoll_rng_uniform(&k, offset, device, count, dtype);
        break;
      case Distribution::kNormal:
        s = detcoll_rng_normal(&k, offset, device, count, dtype, spec.mean, spec.stddev);
        break;
      case Distribution::kBernoulli:
        s = detcoll_rng_bernoulli(&k, offset, device, count, dtype, spec.p);
        break;
      case Distribution::kRandint:
        s = detcoll_rng_randint(&k, offset, device, count, dtype, spec.n);
        break;
    }
    EXPECT_EQ(s, DETCOLL_SUCCESS) << detcoll_last_error();
  } else {
    const Status s = fillDevice(key, spec, offset, count, device, nullptr);
    EXPECT_TRUE(s.isOk()) << s.toString();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<uint8_t> host(bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(device);
  return host;
}

TEST(RngFillGpuTest, DeviceFillsEqualTheCpuFillsBitForBit) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU fill is");
  const Key key = rootKey(0x6a09e667f3bcc908ull);
  const struct {
    uint64_t offset;
    size_t count;
  } ranges[] = {{0, 1},           {3, 5},
                {1, 1000003},     {(uint64_t{1} << 34) - 7, 4099},
                {12345, 1 << 20}, {UINT64_MAX - 4099, 4098}};  // the last ends at 2^64 - 2
  for (const Case& c : cases()) {
    for (const auto& r : ranges) {
      if (c.spec.distribution == Distribution::kRandint && r.offset + r.count > (uint64_t{1} << 48))
        continue;  // randint's elements lie below 2^48
      std::vector<uint8_t> cpu(r.count * dataTypeSize(c.spec.type));
      ASSERT_TRUE(fillHost(key, c.spec, r.offset, r.count, cpu.data()).isOk());
      for (bool capi : {false, true}) {
        const std::vector<uint8_t> gpu = deviceFill(key, c.spec, r.offset, r.count, capi);
        size_t differ = 0, first = cpu.size();
        const size_t width = dataTypeSize(c.spec.type);
        for (size_t i = 0; i < r.count; ++i) {
          if (std::memcmp(&cpu[i * width], &gpu[i * width], width) != 0) {
            ++differ;
            if (first == cpu.size()) first = i;
          }
        }
        EXPECT_EQ(differ, 0u) << c.label << (capi ? " (C API)" : "") << " offset " << r.offset
                              << " count " << r.count << ": first difference at element " << first;
      }
    }
  }
}

// Needs no device: the checks run before any CUDA call.
TEST(RngFillGpuTest, DeviceFillChecksItsArguments) {
  FillSpec spec;
  spec.distribution = Distribution::kUniform;
  spec.type = DataType::kInt32;
  const Status s = fillDevice(rootKey(1), spec, 0, 16, reinterpret_cast<void*>(0x10), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("int32"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace detcoll::kernels::rng
