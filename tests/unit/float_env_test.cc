// A thread's floating-point environment does not reach the reductions (common/float_env.h):
// ranks whose threads flush subnormals to zero, or round toward zero, get the bits of the
// defined environment, and get their own environment back afterwards.

#include "common/float_env.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "collective/allreduce.h"
#include "collective/transport/thread_communicator.h"
#include "tests/support/exact_reference.h"
#include "tests/support/reference.h"

#if defined(__x86_64__) || defined(__i386__)

namespace detcoll {
namespace {

constexpr uint32_t kFlushAndTruncate = (1u << 15) | (1u << 6) | (3u << 13);  // FTZ, DAZ, RZ

// Values around the float32 subnormal range, both signs, non-integer multiples of the smallest
// subnormal: sums whose terms and results are partly subnormal.
std::vector<float> tinyValues(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-149, -118);
  std::vector<float> v(n);
  for (float& x : v) {
    x = static_cast<float>(std::ldexp(mantissa(gen), exponent(gen)) * ((gen() & 1) ? -1 : 1));
  }
  return v;
}

TEST(ExactFloatingPoint, KeepsSubnormalsInsideAndRestoresTheThreadsEnvironment) {
  const uint32_t original = _mm_getcsr();
  _mm_setcsr(original | kFlushAndTruncate);
  volatile float tiny = 0x1p-140f;
  volatile float half = 0.5f;
  EXPECT_EQ(tiny * half, 0.0f) << "the thread's flush-to-zero is not in effect";
  {
    ExactFloatingPoint exact;
    EXPECT_EQ(tiny * half, 0x1p-141f);
    volatile float third = 1.0f / 3.0f;
    float rounded = 0;
    std::memcpy(&rounded, const_cast<float*>(&third), sizeof rounded);
    EXPECT_EQ(rounded, 0x1.555556p-2f) << "not rounded to nearest";
  }
  EXPECT_EQ(_mm_getcsr() & kFlushAndTruncate, kFlushAndTruncate);
  _mm_setcsr(original);
}

TEST(ExactFloatingPoint, MasksTrapsInsideAndRestoresThem) {
  const uint32_t original = _mm_getcsr();
  constexpr uint32_t kOverflowMask = 1u << 10;
  _mm_setcsr(original & ~kOverflowMask);  // overflow traps (SIGFPE) from here
  {
    ExactFloatingPoint exact;
    volatile float big = 0x1p127f;
    volatile float sum = big * 4.0f;  // would trap without the guard
    EXPECT_EQ(sum, INFINITY);
  }
  EXPECT_EQ(_mm_getcsr() & kOverflowMask, 0u) << "the thread's trap was not given back";
  _mm_setcsr(original);
}

TEST(ExactFloatingPoint, AllreduceOnFlushingThreadsGivesTheDefinedBits) {
  const int p = 3;
  const size_t n = 4096;
  for (const Mode mode : {Mode::kOrdered, Mode::kInvariant}) {
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < p; ++r) inputs.push_back(tinyValues(n, 100 + r));
    std::vector<const void*> leaves;
    for (const auto& in : inputs) leaves.push_back(in.data());
    std::vector<float> want(n);
    if (mode == Mode::kOrdered) {
      testing::referenceFold(want.data(), leaves, n, DataType::kFloat32, ReduceOp::kSum, p);
    } else {
      testing::exactInvariantReference(want.data(), leaves, n, DataType::kFloat32, ReduceOp::kSum);
    }
    size_t subnormal = 0;
    for (float x : want) subnormal += std::fpclassify(x) == FP_SUBNORMAL;
    ASSERT_GT(subnormal, n / 4) << "the data does not reach the subnormal range";

    std::vector<std::vector<float>> got(p, std::vector<float>(n));
    std::vector<uint32_t> after(p);
    const Status spawned =
        collective::transport::spawn(p, [&](collective::transport::Communicator& comm) {
          const int r = comm.rank();
          const uint32_t original = _mm_getcsr();
          _mm_setcsr(original | kFlushAndTruncate);
          const void* mine[1] = {inputs[r].data()};
          collective::AllreduceOptions o;
          o.mode = mode;
          o.leaves = mine;
          o.recv = got[r].data();
          o.count = n;
          o.segmentBytes = 1024;  // several rounds of the schedule
          const Status s = collective::allreduce(comm, o);
          after[r] = _mm_getcsr();
          _mm_setcsr(original);
          EXPECT_TRUE(s.isOk()) << s.toString();
        });
    ASSERT_TRUE(spawned.isOk()) << spawned.toString();
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(std::memcmp(got[r].data(), want.data(), n * sizeof(float)), 0)
          << "mode " << static_cast<int>(mode) << ", rank " << r << ": element "
          << testing::firstDifference(got[r].data(), want.data(), n, DataType::kFloat32);
      EXPECT_EQ(after[r] & kFlushAndTruncate, kFlushAndTruncate) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace detcoll

#endif
