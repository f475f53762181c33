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

#include <algorithm>
#include <cstdint>
#include <cstring>
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
#include "tests/support/reference.h"

namespace detcoll {
namespace {

using testing::Buffer;
using testing::DeviceSlab;
using testing::isFloatType;
using testing::pointersOf;
using testing::sameBits;
using testing::sameValues;
using testing::wideLeaves;

constexpr DataType kFloatTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                    DataType::kBFloat16};
constexpr int kPieces[] = {1, 2, 3, 5, 8};
// Vector tails of every length (16 bytes hold 2 to 8 elements), and many blocks.
constexpr size_t kLarge = (size_t{1} << 20) + 3;
constexpr size_t kCounts[] = {1, 7, 8, 9, 1000, kLarge};
// The count-1 pieces of an element of kLarge inputs are too slow to draw for every piece count.
bool drawn(size_t count, int k) {
  return count < kLarge || k == 1 || k == 3 || k == 8;
}

// Where the buffers of a call lie: every one 16-byte aligned (the vector path), every one an
// element off, or only the first input (or the output) off: then each call takes the scalar path.
enum class Layout { kAligned, kAllShifted, kFirstInShifted, kOutShifted };
constexpr Layout kLayouts[] = {Layout::kAligned, Layout::kAllShifted, Layout::kFirstInShifted,
                               Layout::kOutShifted};

std::vector<Layout> layoutsFor(size_t count) {
  if (count >= kLarge) return {Layout::kAligned, Layout::kAllShifted};
  return {std::begin(kLayouts), std::end(kLayouts)};
}

std::string layoutName(Layout layout) {
  switch (layout) {
    case Layout::kAligned:
      return "aligned";
    case Layout::kAllShifted:
      return "all shifted by one element";
    case Layout::kFirstInShifted:
      return "first input shifted";
    case Layout::kOutShifted:
      return "output shifted";
  }
  return "?";
}

size_t shiftOf(Layout layout, bool isOut, size_t index, size_t es) {
  switch (layout) {
    case Layout::kAligned:
      return 0;
    case Layout::kAllShifted:
      return es;
    case Layout::kFirstInShifted:
      return !isOut && index == 0 ? es : 0;
    case Layout::kOutShifted:
      return isOut ? es : 0;
  }
  return 0;
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

uint32_t keyAt(const Buffer& keys, size_t i, size_t kb) {
  uint32_t k = 0;
  std::memcpy(&k, keys.data() + i * kb, kb);
  return k;
}

// The CPU keys of all leaves (a 1-byte placeholder for integers, which have none).
Buffer cpuKeys(const std::vector<Buffer>& leaves, size_t count, DataType type) {
  const size_t kb = kernels::exponentKeyBytes(type);
  Buffer keys(std::max<size_t>(count * kb, 1));
  if (kb > 0) {
    kernels::localMaxKeys(keys.data(), pointersOf(leaves).data(), static_cast<int>(leaves.size()),
                          0, count, type);
  }
  return keys;
}

// What the device encoding of `group` on `keys` must be: the CPU encoding, except that where the
// key is the non-finite key the element holds the group's +inf, -inf and NaN counts, packed.
std::vector<int64_t> expectedEncoding(const std::vector<Buffer>& group, const Buffer& keys,
                                      size_t count, DataType type, size_t* specialElements) {
  std::vector<int64_t> want(count);
  const int n = static_cast<int>(group.size());
  kernels::encodeLeaves(want.data(), pointersOf(group).data(), n, keys.data(), 0, count, type);
  if (!isFloatType(type)) return want;
  const size_t kb = kernels::exponentKeyBytes(type);
  const uint32_t special = kernels::nonFiniteKey(type);
  std::vector<int64_t> counts(3 * kernels::countNonFiniteKeys(keys.data(), count, type), 0);
  kernels::countNonFinite(counts.data(), pointersOf(group).data(), n, keys.data(), count, type);
  constexpr int kBits = 21;
  size_t k = 0;
  for (size_t i = 0; i < count; ++i) {
    if (keyAt(keys, i, kb) != special) continue;
    EXPECT_EQ(want[i], 0) << "the CPU encodes a non-finite element as 0, element " << i;
    const int64_t* c = &counts[3 * k++];
    want[i] = c[0] | (c[1] << kBits) | (c[2] << (2 * kBits));
  }
  *specialElements += k;
  return want;
}

Buffer bytesOf(const std::vector<int64_t>& v) {
  Buffer b(v.size() * sizeof(int64_t));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// ---- the rank-order fold ----------------------------------------------------------------------

void checkFold(DataType type) {
  const size_t es = dataTypeSize(type);
  uint64_t seed = static_cast<uint64_t>(type) * 1000;
  for (int k : kPieces) {
    for (size_t count : kCounts) {
      if (!drawn(count, k)) continue;
      for (bool specials : {false, true}) {
        if (specials && !isFloatType(type)) continue;
        const std::vector<Buffer> leaves = wideLeaves(type, k, count, ++seed, specials);
        for (Layout layout : layoutsFor(count)) {
          DeviceSet in(leaves, layout, es);
          ASSERT_TRUE(in.ok());
          for (ReduceOp op : testing::kAllOps) {
            // Average divides by the piece count, or by another number (the leaves of the ranks).
            const int64_t divisor = op != ReduceOp::kAverage ? 1 : (seed % 2 ? k : 7);
            SCOPED_TRACE(describe(type, "fold " + reduceOpName(op), k, count, specials) +
                         " divisor=" + std::to_string(divisor) + " " + layoutName(layout));
            Buffer want(count * es);
            kernels::foldRankOrder(want.data(), pointersOf(leaves).data(), k, count, type, op,
                                   divisor);
            DeviceSlab out(count * es, shiftOf(layout, true, 0, es));
            ASSERT_TRUE(out.ok()) << out.error();
            ASSERT_TRUE(ran(kernels::device::foldRankOrder(out.data(), in.pointers().data(), k,
                                                           count, type, op, divisor, nullptr)));
            const Buffer got = out.contents();
            ASSERT_TRUE(out.ok()) << out.error();
            ASSERT_TRUE(sameBits(got.data(), want.data(), count, type));
            ASSERT_TRUE(out.guardsIntact());
          }
          ASSERT_TRUE(in.unchanged(leaves));
        }
        // In place over the first and the last input.
        for (int j : k == 1 ? std::vector<int>{0} : std::vector<int>{0, k - 1}) {
          for (ReduceOp op : testing::kAllOps) {
            const int64_t divisor = op == ReduceOp::kAverage ? 3 : 1;
            const Layout layout = j == 0 ? Layout::kAligned : Layout::kAllShifted;
            SCOPED_TRACE(describe(type, "fold " + reduceOpName(op), k, count, specials) +
                         " in place over input " + std::to_string(j) + " " + layoutName(layout));
            Buffer want(count * es);
            kernels::foldRankOrder(want.data(), pointersOf(leaves).data(), k, count, type, op,
                                   divisor);
            DeviceSet in(leaves, layout, es);
            ASSERT_TRUE(in.ok());
            ASSERT_TRUE(ran(kernels::device::foldRankOrder(in[j].data(), in.pointers().data(), k,
                                                           count, type, op, divisor, nullptr)));
            const Buffer got = in[j].contents();
            ASSERT_TRUE(sameBits(got.data(), want.data(), count, type));
            ASSERT_TRUE(in[j].guardsIntact());
            ASSERT_TRUE(in.unchanged(leaves, j));
          }
        }
      }
    }
  }
}

TEST(ReduceGpu, FoldRankOrderMatchesCpu) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU allreduce kernels are");
  for (DataType type : testing::kAllTypes) {
    SCOPED_TRACE(dataTypeName(type));
    ASSERT_NO_FATAL_FAILURE(checkFold(type));
  }
}

// ---- exponent keys ----------------------------------------------------------------------------

TEST(ReduceGpu, LocalMaxKeysMatchCpu) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU allreduce kernels are");
  for (DataType type : kFloatTypes) {
    const size_t es = dataTypeSize(type);
    const size_t kb = kernels::exponentKeyBytes(type);
    uint64_t seed = 5000 + static_cast<uint64_t>(type) * 1000;
    for (int k : kPieces) {
      for (size_t count : kCounts) {
        if (!drawn(count, k)) continue;
        for (bool specials : {false, true}) {
          const std::vector<Buffer> leaves = wideLeaves(type, k, count, ++seed, specials);
          const Buffer want = cpuKeys(leaves, count, type);
          for (Layout layout : layoutsFor(count)) {
            SCOPED_TRACE(describe(type, "keys", k, count, specials) + " " + layoutName(layout));
            DeviceSet in(leaves, layout, es);
            ASSERT_TRUE(in.ok());
            // Keys are written one by one: an address one key off will do.
            DeviceSlab keys(count * kb, shiftOf(layout, true, 0, kb));
            ASSERT_TRUE(keys.ok()) << keys.error();
            ASSERT_TRUE(ran(kernels::device::localMaxKeys(keys.data(), in.pointers().data(), k,
                                                          count, type, nullptr)));
            const Buffer got = keys.contents();
            if (kb == 1) {
              ASSERT_TRUE(sameValues(got.data(), want.data(), count, "key"));
            } else {
              std::vector<uint16_t> g(count), w(count);
              std::memcpy(g.data(), got.data(), count * 2);
              std::memcpy(w.data(), want.data(), count * 2);
              ASSERT_TRUE(sameValues(g.data(), w.data(), count, "key"));
            }
            ASSERT_TRUE(keys.guardsIntact());
            ASSERT_TRUE(in.unchanged(leaves));
          }
        }
      }
    }
  }
}

TEST(ReduceGpu, FoldMaxKeysMatchCpu) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU allreduce kernels are");
  for (DataType type : kFloatTypes) {
    const size_t kb = kernels::exponentKeyBytes(type);
    const uint32_t special = kernels::nonFiniteKey(type);
    uint64_t seed = 9000 + static_cast<uint64_t>(type) * 1000;
    for (int p : kPieces) {
      for (size_t count : kCounts) {
        // Random keys of every value, many zeros and some non-finite keys.
        std::mt19937_64 g(++seed);
        std::vector<Buffer> pieces(p, Buffer(count * kb));
        for (Buffer& piece : pieces) {
          for (size_t i = 0; i < count; ++i) {
            const uint64_t u = g() % 100;
            const uint64_t key = u < 15 ? 0 : u < 20 ? special : g() % (special + 1);
            std::memcpy(piece.data() + i * kb, &key, kb);
          }
        }
        Buffer want(count * kb);
        kernels::foldMaxKeys(want.data(), pointersOf(pieces).data(), p, count, type);
        for (int inPlace : {-1, 0, p - 1}) {
          SCOPED_TRACE(
              describe(type, "key max", p, count, false) +
              (inPlace >= 0 ? " in place over piece " + std::to_string(inPlace) : " out of place"));
          // The first piece one key off (keys are read one by one, at their own alignment).
          DeviceSet in(pieces, Layout::kFirstInShifted, kb);
          DeviceSlab separate(count * kb, 0);
          ASSERT_TRUE(in.ok());
          ASSERT_TRUE(separate.ok()) << separate.error();
          DeviceSlab& out = inPlace >= 0 ? in[inPlace] : separate;
          ASSERT_TRUE(ran(kernels::device::foldMaxKeys(out.data(), in.pointers().data(), p, count,
                                                       type, nullptr)));
          const Buffer got = out.contents();
          ASSERT_TRUE(sameValues(got.data(), want.data(), count * kb, "key byte"));
          ASSERT_TRUE(out.guardsIntact());
          ASSERT_TRUE(in.unchanged(pieces, inPlace));
        }
      }
    }
  }
}

// ---- encodings and their decoding -------------------------------------------------------------

TEST(ReduceGpu, EncodeLeavesMatchesCpuAndCarriesNonFiniteCounts) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU allreduce kernels are");
  for (DataType type : testing::kAllTypes) {
    const size_t es = dataTypeSize(type);
    const size_t kb = kernels::exponentKeyBytes(type);
    size_t specialElements = 0;
    uint64_t seed = 13000 + static_cast<uint64_t>(type) * 1000;
    for (int total : kPieces) {
      for (size_t count : kCounts) {
        if (!drawn(count, total)) continue;
        for (bool specials : {false, true}) {
          if (specials && !isFloatType(type)) continue;
          // The keys are those of every leaf (as after the key allreduce); the group is some of
          // the leaves (one rank's).
          const std::vector<Buffer> all = wideLeaves(type, total, count, ++seed, specials);
          const Buffer keys = cpuKeys(all, count, type);
          DeviceSlab deviceKeys(keys, 0);
          ASSERT_TRUE(deviceKeys.ok()) << deviceKeys.error();
          for (int groupSize : {total, (total + 1) / 2}) {
            const std::vector<Buffer> group(all.begin(), all.begin() + groupSize);
            const std::vector<int64_t> want =
                expectedEncoding(group, keys, count, type, &specialElements);
            for (Layout layout : layoutsFor(count)) {
              SCOPED_TRACE(describe(type, "encode", groupSize, count, specials) + " of " +
                           std::to_string(total) + " leaves, " + layoutName(layout));
              DeviceSet in(group, layout, es);
              DeviceSlab out(count * sizeof(int64_t), shiftOf(layout, true, 0, sizeof(int64_t)));
              ASSERT_TRUE(in.ok());
              ASSERT_TRUE(out.ok()) << out.error();
              ASSERT_TRUE(ran(kernels::device::encodeLeaves(
                  static_cast<int64_t*>(out.data()), in.pointers().data(), groupSize,
                  kb > 0 ? deviceKeys.data() : nullptr, count, type, nullptr)));
              const Buffer bytes = out.contents();
              std::vector<int64_t> got(count);
              std::memcpy(got.data(), bytes.data(), bytes.size());
              ASSERT_TRUE(sameValues(got.data(), want.data(), count, "encoding"));
              ASSERT_TRUE(out.guardsIntact());
              ASSERT_TRUE(in.unchanged(group));
            }
          }
        }
      }
    }
    if (isFloatType(type)) {
      EXPECT_GT(specialElements, 100u) << "the data must exercise the non-finite counts";
    }
  }
}

TEST(ReduceGpu, DecodeSumsMatchesCpuDecodeAndNonFinite) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU allreduce kernels are");
  for (DataType type : testing::kAllTypes) {
    const size_t es = dataTypeSize(type);
    const size_t kb = kernels::exponentKeyBytes(type);
    uint64_t seed = 17000 + static_cast<uint64_t>(type) * 1000;
    for (int p : kPieces) {
      for (size_t count : kCounts) {
        if (!drawn(count, p)) continue;
        for (bool specials : {false, true}) {
          if (specials && !isFloatType(type)) continue;
          // p pieces, each the CPU encoding of a group of leaves with its non-finite counts in
          // place (what a rank's device encoding holds): groups of 1 to 3 leaves.
          std::mt19937_64 g(++seed);
          const int total = p + static_cast<int>(g() % (2 * p + 1));
          const std::vector<Buffer> all = wideLeaves(type, total, count, seed, specials);
          const Buffer keys = cpuKeys(all, count, type);
          std::vector<int> cuts;  // p nonempty groups: p - 1 distinct inner boundaries
          for (int i = 1; i < total; ++i) cuts.push_back(i);
          std::shuffle(cuts.begin(), cuts.end(), g);
          cuts.resize(p - 1);
          cuts.push_back(0);
          cuts.push_back(total);
          std::sort(cuts.begin(), cuts.end());
          const std::vector<const void*> allPointers = pointersOf(all);
          size_t specialElements = 0;
          std::vector<Buffer> pieces;
          for (int j = 0; j < p; ++j) {
            const std::vector<Buffer> group(all.begin() + cuts[j], all.begin() + cuts[j + 1]);
            pieces.push_back(bytesOf(expectedEncoding(group, keys, count, type, &specialElements)));
          }
          DeviceSlab deviceKeys(keys, 0);
          DeviceSet devicePieces(pieces, Layout::kAligned, sizeof(int64_t));
          ASSERT_TRUE(deviceKeys.ok()) << deviceKeys.error();
          ASSERT_TRUE(devicePieces.ok());
          std::vector<const int64_t*> piecePointers;
          for (const void* q : devicePieces.pointers()) {
            piecePointers.push_back(static_cast<const int64_t*>(q));
          }
          // The CPU reference decodes the CPU encodings (with 0 at the non-finite elements) and
          // applies the counts of every leaf.
          std::vector<std::vector<int64_t>> cpuPieces;
          for (int j = 0; j < p; ++j) {
            cpuPieces.emplace_back(count);
            kernels::encodeLeaves(cpuPieces.back().data(), allPointers.data() + cuts[j],
                                  cuts[j + 1] - cuts[j], keys.data(), 0, count, type);
          }
          std::vector<const int64_t*> cpuPointers;
          for (const auto& piece : cpuPieces) cpuPointers.push_back(piece.data());
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
            Buffer want(count * es);
            kernels::decodeSums(want.data(), cpuPointers.data(), p, keys.data(), count, type, op,
                                total);
            if (isFloatType(type)) {
              std::vector<int64_t> counts(3 * kernels::countNonFiniteKeys(keys.data(), count, type),
                                          0);
              kernels::countNonFinite(counts.data(), allPointers.data(), total, keys.data(), count,
                                      type);
              kernels::applyNonFinite(want.data(), counts.data(), keys.data(), count, type);
            }
            for (bool shifted : {false, true}) {
              SCOPED_TRACE(describe(type, "decode " + reduceOpName(op), p, count, specials) +
                           " of " + std::to_string(total) + " leaves" +
                           (shifted ? ", output shifted" : ", output aligned"));
              DeviceSlab out(count * es, shifted ? es : 0);
              ASSERT_TRUE(out.ok()) << out.error();
              ASSERT_TRUE(ran(kernels::device::decodeSums(out.data(), piecePointers.data(), p,
                                                          kb > 0 ? deviceKeys.data() : nullptr,
                                                          count, type, op, total, nullptr)));
              const Buffer got = out.contents();
              ASSERT_TRUE(sameBits(got.data(), want.data(), count, type));
              ASSERT_TRUE(out.guardsIntact());
            }
          }
          ASSERT_TRUE(devicePieces.unchanged(pieces));
        }
      }
    }
  }
}

// ---- the invariant reduction of leaves held in one place --------------------------------------

TEST(ReduceGpu, InvariantReduceLocalMatchesCpu) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU allreduce kernels are");
  for (DataType type : testing::kAllTypes) {
    const size_t es = dataTypeSize(type);
    uint64_t seed = 21000 + static_cast<uint64_t>(type) * 1000;
    for (int k : kPieces) {
      for (size_t count : kCounts) {
        if (!drawn(count, k)) continue;
        for (bool specials : {false, true}) {
          if (specials && !isFloatType(type)) continue;
          const std::vector<Buffer> leaves = wideLeaves(type, k, count, ++seed, specials);
          for (ReduceOp op : testing::kAllOps) {
            Buffer want(count * es);
            kernels::invariantReduceLocal(want.data(), pointersOf(leaves).data(), k, count, type,
                                          op);
            const std::string where =
                describe(type, "invariant " + reduceOpName(op), k, count, specials);
            for (Layout layout : layoutsFor(count)) {
              SCOPED_TRACE(where + " " + layoutName(layout) + " out of place");
              DeviceSet in(leaves, layout, es);
              DeviceSlab out(count * es, shiftOf(layout, true, 0, es));
              ASSERT_TRUE(in.ok());
              ASSERT_TRUE(out.ok()) << out.error();
              ASSERT_TRUE(ran(kernels::device::invariantReduceLocal(
                  out.data(), in.pointers().data(), k, count, type, op, nullptr)));
              const Buffer got = out.contents();
              ASSERT_TRUE(sameBits(got.data(), want.data(), count, type));
              ASSERT_TRUE(out.guardsIntact());
              ASSERT_TRUE(in.unchanged(leaves));
            }
            // In place over one leaf, aligned and shifted.
            const int j = static_cast<int>(seed % k);
            for (Layout layout : {Layout::kAligned, Layout::kAllShifted}) {
              SCOPED_TRACE(where + " " + layoutName(layout) + " in place over leaf " +
                           std::to_string(j));
              DeviceSet in(leaves, layout, es);
              ASSERT_TRUE(in.ok());
              ASSERT_TRUE(ran(kernels::device::invariantReduceLocal(
                  in[j].data(), in.pointers().data(), k, count, type, op, nullptr)));
              const Buffer got = in[j].contents();
              ASSERT_TRUE(sameBits(got.data(), want.data(), count, type));
              ASSERT_TRUE(in[j].guardsIntact());
              ASSERT_TRUE(in.unchanged(leaves, j));
            }
          }
        }
      }
    }
  }
}

// Two runs of the same call give the same bits, and a call on a stream of its own matches the
// default stream's result (the kernels keep no state between calls).
TEST(ReduceGpu, RepeatedCallsOnAnotherStreamGiveTheSameBits) {
  DETCOLL_SKIP_WITHOUT_GPU("the GPU allreduce kernels are");
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
