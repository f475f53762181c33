// kernels/rng/philox.h against the published Random123 known answers, through the header and the C
// API; the stream's block layout of distributions.h; and the batched block generator of fill.h
// (AVX2 where the CPU has it, the scalar loop for the tail) against one block at a time.

#include "kernels/rng/philox.h"

#include <gtest/gtest.h>

#include <bitset>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bindings/c/detcoll.h"
#include "kernels/rng/distributions.h"
#include "kernels/rng/fill.h"

namespace detcoll::kernels::rng {
namespace {

struct KnownAnswer {
  uint32_t ctr[4];
  uint32_t key[2];
  uint32_t out[4];
};

// Random123's kat_vectors for "philox4x32 10".
constexpr KnownAnswer kKnownAnswers[] = {
    {{0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u},
     {0x00000000u, 0x00000000u},
     {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
     {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

std::string hexWords(const uint32_t* w) {
  char text[64];
  std::snprintf(text, sizeof text, "%08x %08x %08x %08x", w[0], w[1], w[2], w[3]);
  return text;
}

TEST(RngPhiloxTest, KnownAnswersThroughTheHeader) {
  for (const KnownAnswer& kat : kKnownAnswers) {
    const Block b =
        philox4x32_10(kat.ctr[0], kat.ctr[1], kat.ctr[2], kat.ctr[3], kat.key[0], kat.key[1]);
    EXPECT_EQ(hexWords(b.v), hexWords(kat.out)) << "counter " << hexWords(kat.ctr);
  }
}

TEST(RngPhiloxTest, KnownAnswersThroughTheCApi) {
  for (const KnownAnswer& kat : kKnownAnswers) {
    uint32_t out[4] = {1, 2, 3, 4};
    detcoll_philox4x32_10(kat.ctr, kat.key, out);
    EXPECT_EQ(hexWords(out), hexWords(kat.out)) << "counter " << hexWords(kat.ctr);
  }
}

// streamBlock(key, b) is Philox of counter (b lo, b hi, key.w[2], key.w[3]) under key
// (key.w[0], key.w[1]), as distributions.h documents: the third known answer, read as a stream.
TEST(RngPhiloxTest, StreamBlockUsesTheDocumentedCounterAndKey) {
  const KnownAnswer& kat = kKnownAnswers[2];
  const Key key{{kat.key[0], kat.key[1], kat.ctr[2], kat.ctr[3]}};
  const uint64_t block = static_cast<uint64_t>(kat.ctr[1]) << 32 | kat.ctr[0];
  EXPECT_EQ(hexWords(streamBlock(key, block).v), hexWords(kat.out));
  const KnownAnswer& ones = kKnownAnswers[1];
  EXPECT_EQ(hexWords(streamBlock(Key{{~0u, ~0u, ~0u, ~0u}}, UINT64_MAX).v), hexWords(ones.out));
}

// Every input bit matters: flipping any one of the 192 input bits changes about half of the 128
// output bits. The Hamming distance of a good permutation is Binomial(128, 1/2): mean 64, sigma
// 5.66; the bounds [35, 93] are about 5 sigma (192 draws, a false failure has odds near 1e-4 and
// the inputs are fixed, so the outcome is deterministic anyway).
TEST(RngPhiloxTest, EveryInputBitChangesAboutHalfTheOutput) {
  const uint32_t ctr[4] = {0x3c6ef372u, 0xa54ff53au, 0x510e527fu, 0x9b05688cu};
  const uint32_t key[2] = {0x1f83d9abu, 0x5be0cd19u};
  const Block base = philox4x32_10(ctr[0], ctr[1], ctr[2], ctr[3], key[0], key[1]);
  for (int bit = 0; bit < 192; ++bit) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    uint32_t* word = bit < 128 ? &c[bit / 32] : &k[(bit - 128) / 32];
    *word ^= 1u << (bit % 32);
    const Block flipped = philox4x32_10(c[0], c[1], c[2], c[3], k[0], k[1]);
    int distance = 0;
    for (int w = 0; w < 4; ++w) distance += std::bitset<32>(base.v[w] ^ flipped.v[w]).count();
    EXPECT_GE(distance, 35) << "input bit " << bit;
    EXPECT_LE(distance, 93) << "input bit " << bit;
  }
}

// streamBlocks, the batched generator every CPU fill uses, equals streamBlock per block for every
// length 0..70 (the vector path takes 16 blocks at a time, the scalar loop the rest) and start
// blocks where the low counter word wraps inside a batch (2^32 - 5), at batch boundaries, and at
// the top of the 64-bit block counter, where it wraps to 0. Nothing past the last block is written.
TEST(RngPhiloxTest, BatchedBlocksEqualOneBlockAtATime) {
  std::mt19937_64 random(0x5eed0001);
  const uint64_t k32 = uint64_t{1} << 32;
  std::vector<uint64_t> starts = {0,
                                  1,
                                  7,
                                  15,
                                  k32 - 5,
                                  k32 - 1,
                                  k32,
                                  k32 - 16,
                                  k32 - 17,
                                  3 * k32 - 9,
                                  k32 * (k32 - 1) - 3,
                                  UINT64_MAX - 69,
                                  UINT64_MAX - 40,
                                  UINT64_MAX - 5,
                                  UINT64_MAX};
  for (int r = 0; r < 4; ++r) starts.push_back(random());
  const Key keys[] = {Key{{0, 0, 0, 0}}, Key{{~0u, ~0u, ~0u, ~0u}},
                      Key{{static_cast<uint32_t>(random()), static_cast<uint32_t>(random()),
                           static_cast<uint32_t>(random()), static_cast<uint32_t>(random())}}};
  constexpr uint32_t kGuard = 0xdeadbeefu;
  for (const Key& key : keys) {
    for (uint64_t first : starts) {
      for (size_t blocks = 0; blocks <= 70; ++blocks) {
        std::vector<uint32_t> words(4 * blocks + 8, kGuard);
        streamBlocks(key, first, blocks, words.data());
        for (size_t j = 0; j < blocks; ++j) {
          const Block expected = streamBlock(key, first + j);
          ASSERT_EQ(hexWords(&words[4 * j]), hexWords(expected.v))
              << "block " << j << " of " << blocks << " from " << first << ", key "
              << hexWords(key.w);
        }
        for (size_t g = 4 * blocks; g < words.size(); ++g) {
          ASSERT_EQ(words[g], kGuard) << "wrote past " << blocks << " blocks from " << first;
        }
      }
    }
  }
}

}  // namespace
}  // namespace detcoll::kernels::rng
