// Caller buffers at any byte address. A tensor may start anywhere (a slice of a byte buffer, a
// packed record), so every kernel that reads or writes a caller's buffer must give on buffers
// 1 and 2 bytes past a 64-byte boundary exactly the bits it gives on aligned ones, in every dtype,
// and without a misaligned access (scripts/sanitize.sh runs this under UBSan's alignment check):
// the CPU's fold and invariant codec (kernels/fold.h, kernels/fixed_point.h), the GPU's bodies
// (kernels/bodies/reduce.h) on the serial executor, and the allreduce with ranks as threads, inline
// and through the schedule, one leaf per rank or several, in place and out of place.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/bodies/reduce_kernels.h"
#include "kernels/fixed_point.h"
#include "kernels/fold.h"
#include "tests/support/serial_executor.h"
#include "tests/support/wide_bits.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

namespace par = kernels::bodies;

using testing::Buffer;
using testing::sameBits;
using testing::Slab;
using testing::wideLeaves;

constexpr size_t kShifts[] = {1, 2};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax};
// Past the CPU kernels' blocks (2048 elements for the fold, 1024 for the invariant codec) with a
// tail that is no whole vector.
constexpr size_t kCount = 2 * 2048 + 37;

std::vector<Slab> slabs(const std::vector<Buffer>& buffers, size_t shift) {
  std::vector<Slab> out;
  for (const Buffer& b : buffers) out.emplace_back(b, shift);
  return out;
}

std::vector<const void*> pointersOf(std::vector<Slab>& slabs) {
  std::vector<const void*> out;
  for (Slab& s : slabs) out.push_back(s.data());
  return out;
}

// Byte equality of two outputs, with the first difference named.
::testing::AssertionResult sameBytes(const uint8_t* got, const uint8_t* want, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure()
             << "byte " << i << " of " << bytes << " differs: " << int{got[i]} << ", aligned "
             << int{want[i]};
    }
  }
  return ::testing::AssertionSuccess();
}

// A kernel call: writes `out` from the inputs.
using Call = std::function<void(void* out, const void* const* inputs, int k)>;

// The call's output (outBytes) on inputs 1 and 2 bytes off, into an output as far off (or aligned:
// the library's own scratch), and (inPlace) over the first input, against its output on aligned
// buffers.
enum class Out { kShifted, kAligned, kInPlaceToo };
::testing::AssertionResult sameOnShiftedBuffers(const std::vector<Buffer>& inputs, size_t outBytes,
                                                const Call& call, Out mode) {
  const int k = static_cast<int>(inputs.size());
  std::vector<Slab> aligned = slabs(inputs, 0);
  Slab want(outBytes, 0);
  call(want.data(), pointersOf(aligned).data(), k);
  for (size_t shift : kShifts) {
    std::vector<Slab> in = slabs(inputs, shift);
    Slab out(outBytes, mode == Out::kAligned ? 0 : shift);
    call(out.data(), pointersOf(in).data(), k);
    ::testing::AssertionResult same = sameBytes(out.data(), want.data(), outBytes);
    if (!same) return same << " (buffers " << shift << " bytes off)";
    if (!out.guardsIntact()) return ::testing::AssertionFailure() << "wrote outside the output";
    if (mode != Out::kInPlaceToo) continue;
    std::vector<Slab> over = slabs(inputs, shift);
    call(over[0].data(), pointersOf(over).data(), k);
    same = sameBytes(over[0].data(), want.data(), outBytes);
    if (!same) return same << " (in place, buffers " << shift << " bytes off)";
  }
  return ::testing::AssertionSuccess();
}

class UnalignedBuffersTest : public ::testing::TestWithParam<DataType> {};

TEST_P(UnalignedBuffersTest, CpuFoldGivesTheAlignedBits) {
  const DataType type = GetParam();
  const size_t es = dataTypeSize(type);
  for (ReduceOp op : kOps) {
    for (int k : {1, 2, 3, 5}) {
      SCOPED_TRACE(reduceOpName(op) + ", " + std::to_string(k) + " inputs");
      const auto inputs = wideLeaves(type, k, kCount, 11 + k, true);
      EXPECT_TRUE(sameOnShiftedBuffers(
          inputs, kCount * es,
          [&](void* out, const void* const* in, int n) {
            kernels::foldRankOrder(out, in, n, kCount, type, op, 3);
          },
          Out::kInPlaceToo));
    }
  }
}

TEST_P(UnalignedBuffersTest, CpuInvariantKernelsGiveTheAlignedBits) {
  const DataType type = GetParam();
  const size_t es = dataTypeSize(type);
  const size_t kb = kernels::exponentKeyBytes(type);
  // 70 float32 leaves take the general path, fewer the double-arithmetic one.
  for (int k : {1, 3, 70}) {
    SCOPED_TRACE(std::to_string(k) + " leaves");
    const size_t count = k > 64 ? 300 : kCount;
    const auto leaves = wideLeaves(type, k, count, 23 + k, true);
    for (ReduceOp op : kOps) {
      SCOPED_TRACE(reduceOpName(op));
      EXPECT_TRUE(sameOnShiftedBuffers(
          leaves, count * es,
          [&](void* out, const void* const* in, int n) {
            kernels::invariantReduceLocal(out, in, n, count, type, op);
          },
          Out::kInPlaceToo));
    }
    if (kb > 0) {
      EXPECT_TRUE(sameOnShiftedBuffers(
          leaves, count * kb,
          [&](void* keys, const void* const* in, int n) {
            std::memset(keys, 0, count * kb);
            kernels::localMaxKeys(keys, in, n, 0, count, type);
          },
          Out::kShifted))
          << "keys";
    }
    // Encodings of the leaves (int64, in the library's scratch), then their decoding into a
    // caller's buffer.
    Buffer keys(std::max<size_t>(count * kb, 1));
    if (kb > 0)
      kernels::localMaxKeys(keys.data(), testing::pointersOf(leaves).data(), k, 0, count, type);
    Buffer sums(count * sizeof(int64_t));
    kernels::encodeLeaves(reinterpret_cast<int64_t*>(sums.data()),
                          testing::pointersOf(leaves).data(), k, keys.data(), 0, count, type);
    EXPECT_TRUE(sameOnShiftedBuffers(
        leaves, count * sizeof(int64_t),
        [&](void* out, const void* const* in, int n) {
          kernels::encodeLeaves(static_cast<int64_t*>(out), in, n, keys.data(), 0, count, type);
        },
        Out::kAligned))
        << "encodings";
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      EXPECT_TRUE(sameOnShiftedBuffers(
          {sums}, count * es,
          [&](void* out, const void*, int) {
            const int64_t* pieces[1] = {reinterpret_cast<const int64_t*>(sums.data())};
            kernels::decodeSums(out, pieces, 1, keys.data(), count, type, op, k);
          },
          Out::kShifted))
          << "decoding, " << reduceOpName(op);
    }
  }
}

TEST_P(UnalignedBuffersTest, DeviceBodiesGiveTheAlignedBits) {
  const DataType type = GetParam();
  const size_t es = dataTypeSize(type);
  const size_t kb = kernels::exponentKeyBytes(type);
  const size_t count = 301;  // a tail of every vector width
  testing::SerialExecutor e;
  for (int k : {1, 3}) {
    SCOPED_TRACE(std::to_string(k) + " pieces");
    const auto pieces = wideLeaves(type, k, count, 37 + k, true);
    for (ReduceOp op : kOps) {
      SCOPED_TRACE(reduceOpName(op));
      EXPECT_TRUE(sameOnShiftedBuffers(
          pieces, count * es,
          [&](void* out, const void* const* in, int n) {
            par::foldRankOrder(e, out, in, n, count, type, op, 3);
          },
          Out::kInPlaceToo))
          << "fold";
      EXPECT_TRUE(sameOnShiftedBuffers(
          pieces, count * es,
          [&](void* out, const void* const* in, int n) {
            par::invariantReduceLocal(e, out, in, n, count, type, op);
          },
          Out::kInPlaceToo))
          << "invariant reduction";
    }
    Buffer keys(std::max<size_t>(count * kb, 1));
    if (kb > 0) {
      kernels::localMaxKeys(keys.data(), testing::pointersOf(pieces).data(), k, 0, count, type);
      EXPECT_TRUE(sameOnShiftedBuffers(
          pieces, count * kb,
          [&](void* out, const void* const* in, int n) {
            std::memset(out, 0, count * kb);
            par::localMaxKeys(e, out, in, n, count, type);
          },
          Out::kShifted))
          << "keys";
    }
    Buffer sums(count * sizeof(int64_t));
    kernels::encodeLeaves(reinterpret_cast<int64_t*>(sums.data()),
                          testing::pointersOf(pieces).data(), k, keys.data(), 0, count, type);
    EXPECT_TRUE(sameOnShiftedBuffers(
        pieces, count * sizeof(int64_t),
        [&](void* out, const void* const* in, int n) {
          par::encodeLeaves(e, static_cast<int64_t*>(out), in, n, keys.data(), count, type);
        },
        Out::kAligned))
        << "encodings";
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      EXPECT_TRUE(sameOnShiftedBuffers(
          {sums}, count * es,
          [&](void* out, const void*, int) {
            const int64_t* in[1] = {reinterpret_cast<const int64_t*>(sums.data())};
            par::decodeSums(e, out, in, 1, keys.data(), count, type, op, k);
          },
          Out::kShifted))
          << "decoding, " << reduceOpName(op);
    }
  }
}

// Every rank's result of an allreduce on buffers `shift` bytes off (0: aligned).
std::vector<Buffer> allreduceShifted(Mode mode, DataType type, ReduceOp op, int p, int leaves,
                                     size_t count, size_t shift, bool inPlace) {
  const size_t es = dataTypeSize(type);
  std::vector<Buffer> results(p);
  testing::runRanks(p, [&](collective::Collectives& c, int rank) {
    c.setSegmentBytes(4096);  // many rounds, shards at every offset
    std::vector<Slab> mine = slabs(wideLeaves(type, leaves, count, 100 * rank + 7, false), shift);
    Slab recv(count * es, shift);
    std::vector<const void*> pointers = pointersOf(mine);
    if (inPlace) {
      std::memcpy(recv.data(), mine[0].data(), count * es);
      pointers[0] = recv.data();
    }
    const Status s = leaves == 1
                         ? c.allreduce(mode, pointers[0], recv.data(), count,
                                       static_cast<int>(type), static_cast<int>(op), "u")
                         : c.allreduceLeaves(mode, pointers.data(), leaves, recv.data(), count,
                                             static_cast<int>(type), static_cast<int>(op), "u");
    EXPECT_TRUE(s.isOk()) << s.toString();
    EXPECT_TRUE(recv.guardsIntact());
    results[rank] = recv.contents();
  });
  return results;
}

TEST_P(UnalignedBuffersTest, AllreduceGivesTheAlignedBits) {
  const DataType type = GetParam();
  constexpr int kRanks = 3;
  for (Mode mode : {Mode::kOrdered, Mode::kInvariant, Mode::kNative}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
      // Inline with the call agreement, and through the schedule.
      for (size_t count : {size_t{5}, size_t{9001}}) {
        for (int leaves : {1, 2}) {
          for (bool inPlace : {false, true}) {
            SCOPED_TRACE(modeName(mode) + " " + reduceOpName(op) + " count " +
                         std::to_string(count) + ", " + std::to_string(leaves) + " leaves" +
                         (inPlace ? ", in place" : ""));
            const auto want = allreduceShifted(mode, type, op, kRanks, leaves, count, 0, inPlace);
            for (size_t shift : kShifts) {
              const auto got =
                  allreduceShifted(mode, type, op, kRanks, leaves, count, shift, inPlace);
              for (int r = 0; r < kRanks; ++r) {
                EXPECT_TRUE(sameBits(got[r].data(), want[r].data(), count, type))
                    << "rank " << r << ", buffers " << shift << " bytes off";
              }
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, UnalignedBuffersTest,
                         ::testing::Values(DataType::kFloat32, DataType::kFloat64,
                                           DataType::kFloat16, DataType::kBFloat16,
                                           DataType::kInt32, DataType::kInt64),
                         [](const auto& info) { return dataTypeName(info.param); });

}  // namespace
}  // namespace detcoll
