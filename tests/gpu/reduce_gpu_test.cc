// The allreduce kernels on the GPU (kernels/reduce_device.h) against their CPU counterparts
// (kernels/fold.h, kernels/fixed_point.h), bit for bit: every dtype, sum/average/min/max where
// they apply, 1 to 8 pieces, counts that leave vector tails (1, 7, 8, 9, 1000) and a large one
// (2^20 + 3, many blocks of the grid-stride loop), buffers at 16-byte boundaries (the vector
// path) and one element off (the scalar path), in place; random non-integer inputs over the
// whole exponent range with zeros, -0 and subnormals, and runs with +inf, -inf and NaN sprinkled.
// Every kernel must also leave the bytes around its output and its inputs alone. Skips, saying
// so, when no GPU is present.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/fixed_point.h"
#include "kernels/fold.h"
#include "kernels/reduce_device.h"
#include "tests/gpu/device_buffers.h"
#include "tests/gpu/gpu_test.h"
#include "tests/support/codec_reference.h"
#include "tests/support/reference.h"
#include "tests/support/wide_bits.h"

namespace detcoll {
namespace {

using testing::Buffer;
using testing::cpuKeys;
using testing::DeviceSlab;
using testing::Expected;
using testing::isFloatType;
using testing::Layout;
using testing::layoutName;
using testing::pointersOf;
using testing::sameBits;
using testing::shiftOf;
using testing::wideLeaves;

// Vector tails of every length (16 bytes hold 2 to 8 elements), and many blocks.
constexpr size_t kLarge = (size_t{1} << 20) + 3;
constexpr size_t kCounts[] = {1, 7, 8, 9, 1000, kLarge};
// The count-1 pieces of an element of kLarge inputs are too slow to draw for every piece count.
bool drawn(int k, size_t count) {
  return count < kLarge || k == 1 || k == 3 || k == 8;
}

std::vector<Layout> layoutsFor(size_t count) {
  if (count >= kLarge) return {Layout::kAligned, Layout::kAllShifted};
  return {std::begin(testing::kLayouts), std::end(testing::kLayouts)};
}

std::string describe(DataType type, const std::string& what, int k, size_t count, bool specials) {
  return dataTypeName(type) + " " + what + " k=" + std::to_string(k) +
         " count=" + std::to_string(count) + (specials ? " with inf/NaN" : "");
}

// Device copies of host buffers, laid out as `layout` says.
class DeviceSet {
 public:
  DeviceSet(const std::vector<Buffer>& host, Layout layout, size_t es) {
    for (size_t j = 0; j < host.size(); ++j) {
      slabs_.push_back(std::make_unique<DeviceSlab>(host[j], shiftOf(layout, false, j, es)));
    }
  }
  DeviceSlab& operator[](size_t j) { return *slabs_[j]; }
  std::vector<const void*> pointers() const {
    std::vector<const void*> out;
    for (const auto& s : slabs_) out.push_back(s->data());
    return out;
  }
  ::testing::AssertionResult ok() const {
    for (const auto& s : slabs_) {
      if (!s->ok()) return ::testing::AssertionFailure() << s->error();
    }
    return ::testing::AssertionSuccess();
  }
  // Every buffer but `skip` still holds its host original, and no guard byte changed.
  ::testing::AssertionResult unchanged(const std::vector<Buffer>& host, int skip = -1) {
    for (size_t j = 0; j < slabs_.size(); ++j) {
      if (static_cast<int>(j) == skip) continue;
      if (slabs_[j]->contents() != host[j]) {
        return ::testing::AssertionFailure() << "input " << j << " was written";
      }
      const ::testing::AssertionResult guards = slabs_[j]->guardsIntact();
      if (!guards)
        return ::testing::AssertionFailure() << "input " << j << ": " << guards.message();
    }
    return ::testing::AssertionSuccess();
  }

 private:
  std::vector<std::unique_ptr<DeviceSlab>> slabs_;
};

// Status of an enqueued device call, and the CUDA failures it left.
::testing::AssertionResult ran(const Status& s) {
  if (!s.isOk()) return ::testing::AssertionFailure() << s.toString();
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    return ::testing::AssertionFailure() << "the kernel failed: " << cudaGetErrorString(e);
  }
  return ::testing::AssertionSuccess();
}

// A device kernel call on the default stream: writes `out` from the device inputs `in`.
using DeviceCall = std::function<Status(void* out, const void* const* in)>;

// Runs `call` on device copies of `inputs` (elements of es bytes) laid out as `layout`, into an
// output of its own (inPlace < 0) or over input inPlace, and checks that it ran, that the output
// holds what `expected` says, that nothing was written around the output and that the other
// inputs are unchanged.
::testing::AssertionResult deviceGives(const std::vector<Buffer>& inputs, size_t es, Layout layout,
                                       int inPlace, const Expected& expected,
                                       const DeviceCall& call) {
  const size_t outEs = expected.elementBytes();
  DeviceSet in(inputs, layout, es);
  DeviceSlab separate(inPlace >= 0 ? 0 : expected.count * outEs, shiftOf(layout, true, 0, outEs));
  DeviceSlab& out = inPlace >= 0 ? in[inPlace] : separate;
  ::testing::AssertionResult step = in.ok();
  if (step && !out.ok()) step = ::testing::AssertionFailure() << out.error();
  if (step) step = ran(call(out.data(), in.pointers().data()));
  Buffer got;
  if (step) got = out.contents();
  if (step && !out.ok()) step = ::testing::AssertionFailure() << out.error();
  if (step) step = expected.heldBy(got.data());
  if (step) step = out.guardsIntact();
  if (step) step = in.unchanged(inputs, inPlace);
  return step;
}

// Every piece count and count (the large one with some piece counts only), with and without inf
// and NaN (the float dtypes only).
void forEachDraw(DataType type,
                 const std::function<void(int k, size_t count, bool specials)>& draw) {
  testing::forEachDraw(type, testing::kPieceCounts, kCounts, drawn, draw);
}

// Every test of the kernels needs a device: skipped, saying so, without one.
class ReduceGpu : public ::testing::Test {
 protected:
  void SetUp() override { DETCOLL_SKIP_WITHOUT_GPU("the GPU allreduce kernels are"); }
};

// ---- the rank-order fold ----------------------------------------------------------------------

Buffer cpuFold(const std::vector<Buffer>& leaves, size_t count, DataType type, ReduceOp op,
               int64_t divisor) {
  Buffer want(count * dataTypeSize(type));
  kernels::foldRankOrder(want.data(), pointersOf(leaves).data(), static_cast<int>(leaves.size()),
                         count, type, op, divisor);
  return want;
}

DeviceCall deviceFold(int k, size_t count, DataType type, ReduceOp op, int64_t divisor) {
  return [=](void* out, const void* const* in) {
    return kernels::device::foldRankOrder(out, in, k, count, type, op, divisor, nullptr);
  };
}

TEST_F(ReduceGpu, FoldRankOrderMatchesCpu) {
  for (DataType type : testing::kAllTypes) {
    const size_t es = dataTypeSize(type);
    uint64_t seed = static_cast<uint64_t>(type) * 1000;
    forEachDraw(type, [&](int k, size_t count, bool specials) {
      const std::vector<Buffer> leaves = wideLeaves(type, k, count, ++seed, specials);
      for (Layout layout : layoutsFor(count)) {
        for (ReduceOp op : testing::kAllOps) {
          // Average divides by the piece count, or by another number (the leaves of the ranks).
          const int64_t divisor = op != ReduceOp::kAverage ? 1 : (seed % 2 ? k : 7);
          const Buffer want = cpuFold(leaves, count, type, op, divisor);
          ASSERT_TRUE(deviceGives(leaves, es, layout, -1, {want, count, type},
                                  deviceFold(k, count, type, op, divisor)))
              << describe(type, "fold " + reduceOpName(op), k, count, specials)
              << " divisor=" << divisor << " " << layoutName(layout);
        }
      }
      // In place over the first and the last input.
      for (int j : k == 1 ? std::vector<int>{0} : std::vector<int>{0, k - 1}) {
        for (ReduceOp op : testing::kAllOps) {
          const int64_t divisor = op == ReduceOp::kAverage ? 3 : 1;
          const Layout layout = j == 0 ? Layout::kAligned : Layout::kAllShifted;
          const Buffer want = cpuFold(leaves, count, type, op, divisor);
          ASSERT_TRUE(deviceGives(leaves, es, layout, j, {want, count, type},
                                  deviceFold(k, count, type, op, divisor)))
              << describe(type, "fold " + reduceOpName(op), k, count, specials)
              << " in place over input " << j << " " << layoutName(layout);
        }
      }
    });
    if (HasFatalFailure()) return;
  }
}

// ---- exponent keys ----------------------------------------------------------------------------

TEST_F(ReduceGpu, LocalMaxKeysMatchCpu) {
  for (DataType type : testing::kFloatTypes) {
    const size_t es = dataTypeSize(type);
    const size_t kb = kernels::exponentKeyBytes(type);
    uint64_t seed = 5000 + static_cast<uint64_t>(type) * 1000;
    forEachDraw(type, [&](int k, size_t count, bool specials) {
      const std::vector<Buffer> leaves = wideLeaves(type, k, count, ++seed, specials);
      const Buffer want = cpuKeys(leaves, count, type);
      const DeviceCall keys = [&](void* out, const void* const* in) {
        return kernels::device::localMaxKeys(out, in, k, count, type, nullptr);
      };
      // Keys are written one by one: an output one key off will do.
      for (Layout layout : layoutsFor(count)) {
        ASSERT_TRUE(deviceGives(leaves, es, layout, -1, {want, count, type, kb}, keys))
            << describe(type, "keys", k, count, specials) << " " << layoutName(layout);
      }
    });
    if (HasFatalFailure()) return;
  }
}

TEST_F(ReduceGpu, FoldMaxKeysMatchCpu) {
  for (DataType type : testing::kFloatTypes) {
    const size_t kb = kernels::exponentKeyBytes(type);
    const uint32_t special = kernels::nonFiniteKey(type);
    uint64_t seed = 9000 + static_cast<uint64_t>(type) * 1000;
    for (int p : testing::kPieceCounts) {
      for (size_t count : kCounts) {
        // Random keys of every value, many zeros and some non-finite keys.
        const std::vector<Buffer> pieces = testing::randomKeys(p, count, kb, special, ++seed);
        Buffer want(count * kb);
        kernels::foldMaxKeys(want.data(), pointersOf(pieces).data(), p, count, type);
        const DeviceCall keyMax = [&](void* out, const void* const* in) {
          return kernels::device::foldMaxKeys(out, in, p, count, type, nullptr);
        };
        // The first piece one key off (keys are read one by one, at their own alignment).
        for (int inPlace : {-1, 0, p - 1}) {
          ASSERT_TRUE(deviceGives(pieces, kb, Layout::kFirstInShifted, inPlace,
                                  {want, count, type, kb}, keyMax))
              << describe(type, "key max", p, count, false)
              << (inPlace >= 0 ? " in place over piece " + std::to_string(inPlace)
                               : " out of place");
        }
      }
    }
  }
}

// ---- encodings and their decoding -------------------------------------------------------------

TEST_F(ReduceGpu, EncodeLeavesMatchesCpuAndCarriesNonFiniteCounts) {
  for (DataType type : testing::kAllTypes) {
    const size_t es = dataTypeSize(type);
    const size_t kb = kernels::exponentKeyBytes(type);
    size_t specialElements = 0;
    uint64_t seed = 13000 + static_cast<uint64_t>(type) * 1000;
    forEachDraw(type, [&](int total, size_t count, bool specials) {
      // The keys are those of every leaf (as after the key allreduce); the group is some of the
      // leaves (one rank's).
      const std::vector<Buffer> all = wideLeaves(type, total, count, ++seed, specials);
      const Buffer keys = cpuKeys(all, count, type);
      DeviceSlab deviceKeys(keys, 0);
      ASSERT_TRUE(deviceKeys.ok()) << deviceKeys.error();
      for (int groupSize : {total, (total + 1) / 2}) {
        const std::vector<Buffer> group(all.begin(), all.begin() + groupSize);
        const Buffer want =
            testing::bytesOf(testing::expectedEncoding(group, keys, count, type, &specialElements));
        const DeviceCall encode = [&](void* out, const void* const* in) {
          return kernels::device::encodeLeaves(static_cast<int64_t*>(out), in, groupSize,
                                               kb > 0 ? deviceKeys.data() : nullptr, count, type,
                                               nullptr);
        };
        for (Layout layout : layoutsFor(count)) {
          ASSERT_TRUE(deviceGives(group, es, layout, -1, {want, count, DataType::kInt64}, encode))
              << describe(type, "encode", groupSize, count, specials) << " of " << total
              << " leaves, " << layoutName(layout);
        }
      }
    });
    if (HasFatalFailure()) return;
    if (isFloatType(type)) {
      EXPECT_GT(specialElements, 100u) << "the data must exercise the non-finite counts";
    }
  }
}

TEST_F(ReduceGpu, DecodeSumsMatchesCpuDecodeAndNonFinite) {
  for (DataType type : testing::kAllTypes) {
    const size_t kb = kernels::exponentKeyBytes(type);
    uint64_t seed = 17000 + static_cast<uint64_t>(type) * 1000;
    forEachDraw(type, [&](int p, size_t count, bool specials) {
      // p pieces, each the CPU encoding of a group of leaves with its non-finite counts in place
      // (what a rank's device encoding holds): groups of 1 to 3 leaves.
      std::mt19937_64 g(++seed);
      const int total = p + static_cast<int>(g() % (2 * p + 1));
      const std::vector<Buffer> all = wideLeaves(type, total, count, seed, specials);
      const Buffer keys = cpuKeys(all, count, type);
      const std::vector<int> cuts = testing::groupBoundaries(total, p, g);
      size_t specialElements = 0;
      std::vector<Buffer> pieces;
      for (int j = 0; j < p; ++j) {
        const std::vector<Buffer> group(all.begin() + cuts[j], all.begin() + cuts[j + 1]);
        pieces.push_back(testing::bytesOf(
            testing::expectedEncoding(group, keys, count, type, &specialElements)));
      }
      DeviceSlab deviceKeys(keys, 0);
      ASSERT_TRUE(deviceKeys.ok()) << deviceKeys.error();
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        const Buffer want = testing::decodedReference(all, cuts, keys, count, type, op);
        const DeviceCall decode = [&](void* out, const void* const* in) {
          std::vector<const int64_t*> encodings;
          for (int j = 0; j < p; ++j) encodings.push_back(static_cast<const int64_t*>(in[j]));
          return kernels::device::decodeSums(out, encodings.data(), p,
                                             kb > 0 ? deviceKeys.data() : nullptr, count, type, op,
                                             total, nullptr);
        };
        // The pieces aligned, the output aligned or one element off.
        for (Layout layout : {Layout::kAligned, Layout::kOutShifted}) {
          ASSERT_TRUE(deviceGives(pieces, sizeof(int64_t), layout, -1, {want, count, type}, decode))
              << describe(type, "decode " + reduceOpName(op), p, count, specials) << " of " << total
              << " leaves, " << layoutName(layout);
        }
      }
    });
    if (HasFatalFailure()) return;
  }
}

// ---- the invariant reduction of leaves held in one place --------------------------------------

TEST_F(ReduceGpu, InvariantReduceLocalMatchesCpu) {
  for (DataType type : testing::kAllTypes) {
    const size_t es = dataTypeSize(type);
    uint64_t seed = 21000 + static_cast<uint64_t>(type) * 1000;
    forEachDraw(type, [&](int k, size_t count, bool specials) {
      const std::vector<Buffer> leaves = wideLeaves(type, k, count, ++seed, specials);
      for (ReduceOp op : testing::kAllOps) {
        Buffer want(count * es);
        kernels::invariantReduceLocal(want.data(), pointersOf(leaves).data(), k, count, type, op);
        const DeviceCall reduce = [&](void* out, const void* const* in) {
          return kernels::device::invariantReduceLocal(out, in, k, count, type, op, nullptr);
        };
        const std::string where =
            describe(type, "invariant " + reduceOpName(op), k, count, specials);
        for (Layout layout : layoutsFor(count)) {
          ASSERT_TRUE(deviceGives(leaves, es, layout, -1, {want, count, type}, reduce))
              << where << " " << layoutName(layout) << " out of place";
        }
        // In place over one leaf, aligned and shifted.
        const int j = static_cast<int>(seed % k);
        for (Layout layout : {Layout::kAligned, Layout::kAllShifted}) {
          ASSERT_TRUE(deviceGives(leaves, es, layout, j, {want, count, type}, reduce))
              << where << " " << layoutName(layout) << " in place over leaf " << j;
        }
      }
    });
    if (HasFatalFailure()) return;
  }
}

// Two runs of the same call give the same bits, and a call on a stream of its own matches the
// default stream's result (the kernels keep no state between calls).
TEST_F(ReduceGpu, RepeatedCallsOnAnotherStreamGiveTheSameBits) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (DataType type : testing::kAllTypes) {
    const size_t es = dataTypeSize(type);
    const size_t count = 100003;
    const std::vector<Buffer> leaves =
        wideLeaves(type, 5, count, 31 + static_cast<int>(type), isFloatType(type));
    Buffer want(count * es);
    kernels::invariantReduceLocal(want.data(), pointersOf(leaves).data(), 5, count, type,
                                  ReduceOp::kAverage);
    DeviceSet in(leaves, Layout::kAligned, es);
    ASSERT_TRUE(in.ok());
    for (int run = 0; run < 3; ++run) {
      SCOPED_TRACE(dataTypeName(type) + " run " + std::to_string(run));
      DeviceSlab out(count * es, 0);
      ASSERT_TRUE(out.ok()) << out.error();
      ASSERT_TRUE(kernels::device::invariantReduceLocal(out.data(), in.pointers().data(), 5, count,
                                                        type, ReduceOp::kAverage,
                                                        run == 0 ? nullptr : stream)
                      .isOk());
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const Buffer got = out.contents();
      ASSERT_TRUE(sameBits(got.data(), want.data(), count, type));
    }
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace detcoll
