#include "kernels/rng/fill.h"

#include <algorithm>
#include <cmath>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/rng/distributions.h"

namespace detcoll::kernels::rng {
namespace {

// Blocks generated per step of a fill: 4 KiB of words, in L1.
constexpr size_t kChunkBlocks = 256;
// Elements below which another thread is not worth starting.
constexpr size_t kMinElementsPerThread = size_t{1} << 16;

DETCOLL_FORCE_INLINE Block blockAt(const uint32_t* w) {
  return Block{{w[0], w[1], w[2], w[3]}};
}

// out[i - offset] = convert(words, k, i) for i in [offset, offset + count), where `words` holds
// the chunk's blocks and k = i - E * (the chunk's first block) indexes elements within it.
template <int E, typename T, typename Convert>
void fillBlocks(const Key& key, uint64_t offset, size_t count, T* out, Convert convert) {
  uint32_t words[4 * kChunkBlocks];
  const uint64_t end = offset + count;
  uint64_t i = offset;
  while (i < end) {
    // No product here may reach 2^64: a range may end at the last element of the stream.
    const uint64_t first = i / E;
    const size_t blocks = std::min<uint64_t>(kChunkBlocks, (end - 1) / E + 1 - first);
    streamBlocks(key, first, blocks, words);
    const size_t k0 = i - first * E;
    const size_t n = std::min<uint64_t>(end - i, blocks * E - k0);
    T* dst = out + (i - offset);
    for (size_t j = 0; j < n; ++j) dst[j] = convert(words, k0 + j, i + j);
    i += n;
  }
}

// 1 or 0 in T: `one` is the bits of 1 (0x3c00 for float16, 0x3f80 for bfloat16, as uint16_t).
template <typename T>
void fillBernoulli(const Key& key, uint64_t offset, size_t count, T* out, uint64_t threshold,
                   T one) {
  fillBlocks<4>(key, offset, count, out, [threshold, one](const uint32_t* w, size_t k, uint64_t) {
    return w[k] < threshold ? one : T(0);
  });
}

// Element i's first attempt uses block i, so a range's first attempts are one batch of blocks;
// the rare element that needs more attempts than its block holds takes the per-element path.
template <typename T>
void fillRandint(const Key& key, uint64_t offset, size_t count, T* out, uint64_t n) {
  uint32_t words[4 * kChunkBlocks];
  const uint64_t reject = lemireRejectBelow(n);
  for (size_t begin = 0; begin < count; begin += kChunkBlocks) {
    const size_t m = std::min(kChunkBlocks, count - begin);
    streamBlocks(key, offset + begin, m, words);
    for (size_t j = 0; j < m; ++j) {
      const uint64_t x0 =
          static_cast<uint64_t>(words[4 * j]) | static_cast<uint64_t>(words[4 * j + 1]) << 32;
      const uint64_t x1 =
          static_cast<uint64_t>(words[4 * j + 2]) | static_cast<uint64_t>(words[4 * j + 3]) << 32;
      uint64_t value;
      if (!lemireAccept(x0, n, reject, &value) && !lemireAccept(x1, n, reject, &value)) {
        value = randint(key, offset + begin + j, n);
      }
      out[begin + j] = static_cast<T>(value);
    }
  }
}

void fillRange(const Key& key, const FillSpec& spec, uint64_t offset, size_t count, void* out) {
  const bool f32 = spec.type == DataType::kFloat32;
  switch (spec.distribution) {
    case Distribution::kUniform:
      if (f32) {
        fillBlocks<4>(
            key, offset, count, static_cast<float*>(out),
            [](const uint32_t* w, size_t k, uint64_t) { return uniformFloat32FromWord(w[k]); });
      } else {
        fillBlocks<2>(key, offset, count, static_cast<double*>(out),
                      [](const uint32_t* w, size_t k, uint64_t) {
                        return uniformFloat64FromBits(static_cast<uint64_t>(w[2 * k]) |
                                                      static_cast<uint64_t>(w[2 * k + 1]) << 32);
                      });
      }
      return;
    case Distribution::kNormal: {
      // Elements 2m and 2m + 1 share one Box-Muller pair: compute it once.
      const double mean = spec.mean, stddev = spec.stddev;
      uint64_t pair = UINT64_MAX;
      double zc = 0, zs = 0;
      if (f32) {
        fillBlocks<4>(key, offset, count, static_cast<float*>(out),
                      [=](const uint32_t* w, size_t k, uint64_t i) mutable {
                        if (i >> 1 != pair) {
                          double u1, u2;
                          normalFloat32Uniforms(blockAt(w + 4 * (k / 4)), i, &u1, &u2);
                          boxMuller(u1, u2, &zc, &zs);
                          pair = i >> 1;
                        }
                        return static_cast<float>(dAdd(mean, dMul(stddev, (i & 1) ? zs : zc)));
                      });
      } else {
        fillBlocks<2>(key, offset, count, static_cast<double*>(out),
                      [=](const uint32_t* w, size_t k, uint64_t i) mutable {
                        if (i >> 1 != pair) {
                          double u1, u2;
                          normalFloat64Uniforms(blockAt(w + 4 * (k / 2)), &u1, &u2);
                          boxMuller(u1, u2, &zc, &zs);
                          pair = i >> 1;
                        }
                        return dAdd(mean, dMul(stddev, (i & 1) ? zs : zc));
                      });
      }
      return;
    }
    case Distribution::kBernoulli: {
      const uint64_t t = bernoulliThreshold(spec.p);
      switch (spec.type) {
        case DataType::kFloat32:
          return fillBernoulli(key, offset, count, static_cast<float*>(out), t, 1.0f);
        case DataType::kFloat64:
          return fillBernoulli(key, offset, count, static_cast<double*>(out), t, 1.0);
        case DataType::kInt32:
          return fillBernoulli(key, offset, count, static_cast<int32_t*>(out), t, int32_t{1});
        case DataType::kInt64:
          return fillBernoulli(key, offset, count, static_cast<int64_t*>(out), t, int64_t{1});
        case DataType::kFloat16:
          return fillBernoulli(key, offset, count, static_cast<uint16_t*>(out), t,
                               uint16_t{0x3c00});
        case DataType::kBFloat16:
          return fillBernoulli(key, offset, count, static_cast<uint16_t*>(out), t,
                               uint16_t{0x3f80});
      }
      return;
    }
    case Distribution::kRandint:
      if (spec.type == DataType::kInt32) {
        fillRandint(key, offset, count, static_cast<int32_t*>(out), spec.n);
      } else {
        fillRandint(key, offset, count, static_cast<int64_t*>(out), spec.n);
      }
      return;
  }
}

}  // namespace

std::string distributionName(Distribution distribution) {
  switch (distribution) {
    case Distribution::kUniform:
      return "uniform";
    case Distribution::kNormal:
      return "normal";
    case Distribution::kBernoulli:
      return "bernoulli";
    case Distribution::kRandint:
      return "randint";
  }
  return "distribution(" + std::to_string(static_cast<int>(distribution)) + ")";
}

Status checkFill(const char* what, const FillSpec& spec, uint64_t offset, size_t count,
                 const void* out) {
  // Runs on every fill, tiny ones included: messages are built only on failure.
  auto fail = [what](const std::string& why) {
    return Status::invalidArgument(std::string(what) + ": " + why);
  };
  const int distribution = static_cast<int>(spec.distribution);
  if (distribution < 0 || distribution > static_cast<int>(Distribution::kRandint)) {
    return fail("unknown " + distributionName(spec.distribution));
  }
  if (!isValidDataType(static_cast<int>(spec.type))) {
    return fail("unknown dtype " + std::to_string(static_cast<int>(spec.type)));
  }
  const bool floating = spec.type == DataType::kFloat32 || spec.type == DataType::kFloat64;
  switch (spec.distribution) {
    case Distribution::kUniform:
    case Distribution::kNormal:
      if (!floating) {
        return fail(distributionName(spec.distribution) + " fills float32 or float64, not " +
                    dataTypeName(spec.type));
      }
      if (spec.distribution == Distribution::kNormal &&
          !(std::isfinite(spec.mean) && std::isfinite(spec.stddev) && spec.stddev >= 0)) {
        return fail("normal needs a finite mean and a finite stddev >= 0");
      }
      break;
    case Distribution::kBernoulli:
      if (!(spec.p >= 0.0 && spec.p <= 1.0)) {
        return fail("bernoulli probability " + std::to_string(spec.p) + " is not in [0, 1]");
      }
      break;
    case Distribution::kRandint: {
      if (spec.type != DataType::kInt32 && spec.type != DataType::kInt64) {
        return fail("randint fills int32 or int64, not " + dataTypeName(spec.type));
      }
      const uint64_t limit = spec.type == DataType::kInt32 ? uint64_t{1} << 31 : uint64_t{1} << 63;
      if (spec.n < 1 || spec.n > limit) {
        return fail("randint range n = " + std::to_string(spec.n) + " must be in [1, " +
                    std::to_string(limit) + "] for " + dataTypeName(spec.type));
      }
      if (offset > kRandintIndexLimit || count > kRandintIndexLimit - offset) {
        return fail("randint elements must lie below 2^48 (offset " + std::to_string(offset) +
                    ", count " + std::to_string(count) + ")");
      }
      break;
    }
  }
  if (count > 0 && out == nullptr) return fail("out is null");
  const size_t width = dataTypeSize(spec.type);
  if (count > 0 && reinterpret_cast<uintptr_t>(out) % width != 0) {
    return fail("out is not aligned to its dtype (" + dataTypeName(spec.type) + ", " +
                std::to_string(width) + " bytes)");
  }
  if (count > UINT64_MAX - offset) return fail("offset + count must stay below 2^64");
  return Status::ok();
}

namespace {

void streamBlocksScalar(const Key& key, uint64_t firstBlock, size_t blocks, uint32_t* words) {
  for (size_t j = 0; j < blocks; ++j) {
    const Block b = streamBlock(key, firstBlock + j);
    for (int w = 0; w < 4; ++w) words[4 * j + w] = b.v[w];
  }
}

#if defined(__x86_64__)
// Eight Philox streams per 256-bit register, two registers in flight: lane l of c0..c3 holds
// words 0..3 of block (first + l). The 32x32->64-bit products come from _mm256_mul_epu32 on the
// even lanes and on the odd lanes shifted down.
struct Lanes8 {
  __m256i c0, c1, c2, c3;
};

__attribute__((target("avx2"))) DETCOLL_FORCE_INLINE void mulHiLo(__m256i a, __m256i m, __m256i* hi,
                                                                  __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xaa);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xaa);
}

__attribute__((target("avx2"))) DETCOLL_FORCE_INLINE void round8(Lanes8& x, __m256i k0,
                                                                 __m256i k1) {
  __m256i hi0, lo0, hi1, lo1;
  mulHiLo(x.c0, _mm256_set1_epi32(static_cast<int>(kPhiloxM0)), &hi0, &lo0);
  mulHiLo(x.c2, _mm256_set1_epi32(static_cast<int>(kPhiloxM1)), &hi1, &lo1);
  x.c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, x.c1), k0);
  x.c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, x.c3), k1);
  x.c1 = lo1;
  x.c3 = lo0;
}

// Lanes to blocks: words[4 l + w] = lane l of c_w.
__attribute__((target("avx2"))) DETCOLL_FORCE_INLINE void store8(const Lanes8& x, uint32_t* words) {
  const __m256i t0 = _mm256_unpacklo_epi32(x.c0, x.c1);
  const __m256i t1 = _mm256_unpackhi_epi32(x.c0, x.c1);
  const __m256i t2 = _mm256_unpacklo_epi32(x.c2, x.c3);
  const __m256i t3 = _mm256_unpackhi_epi32(x.c2, x.c3);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2);  // blocks 0 | 4
  const __m256i u1 = _mm256_unpackhi_epi64(t0, t2);  // blocks 1 | 5
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3);  // blocks 2 | 6
  const __m256i u3 = _mm256_unpackhi_epi64(t1, t3);  // blocks 3 | 7
  auto* out = reinterpret_cast<__m256i*>(words);
  _mm256_storeu_si256(out + 0, _mm256_permute2x128_si256(u0, u1, 0x20));
  _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
  _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
  _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
}

__attribute__((target("avx2"))) DETCOLL_FORCE_INLINE Lanes8 start8(const Key& key, uint64_t first) {
  const __m256i offsets = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i low = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first)), offsets);
  // The high word carries when the low word wraps within the eight blocks.
  const __m256i wrapped = _mm256_cmpgt_epi32(
      _mm256_xor_si256(_mm256_set1_epi32(static_cast<int>(first)), _mm256_set1_epi32(INT32_MIN)),
      _mm256_xor_si256(low, _mm256_set1_epi32(INT32_MIN)));
  const __m256i high = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(first >> 32)), wrapped);
  return Lanes8{low, high, _mm256_set1_epi32(static_cast<int>(key.w[2])),
                _mm256_set1_epi32(static_cast<int>(key.w[3]))};
}

__attribute__((target("avx2"))) void streamBlocksAvx2(const Key& key, uint64_t firstBlock,
                                                      size_t blocks, uint32_t* words) {
  size_t j = 0;
  for (; j + 16 <= blocks; j += 16) {
    Lanes8 a = start8(key, firstBlock + j);
    Lanes8 b = start8(key, firstBlock + j + 8);
    uint32_t k0 = key.w[0], k1 = key.w[1];
    for (int round = 0; round < kPhiloxRounds; ++round) {
      const __m256i vk0 = _mm256_set1_epi32(static_cast<int>(k0));
      const __m256i vk1 = _mm256_set1_epi32(static_cast<int>(k1));
      round8(a, vk0, vk1);
      round8(b, vk0, vk1);
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    store8(a, words + 4 * j);
    store8(b, words + 4 * j + 32);
  }
  streamBlocksScalar(key, firstBlock + j, blocks - j, words + 4 * j);
}
#endif

}  // namespace

void streamBlocks(const Key& key, uint64_t firstBlock, size_t blocks, uint32_t* words) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return streamBlocksAvx2(key, firstBlock, blocks, words);
#endif
  streamBlocksScalar(key, firstBlock, blocks, words);
}

Status fillHost(const Key& key, const FillSpec& spec, uint64_t offset, size_t count, void* out,
                int threads) {
  DETCOLL_RETURN_IF_ERROR(checkFill("fill", spec, offset, count, out));
  if (threads < 1) {
    return Status::invalidArgument("fill: threads must be at least 1, got " +
                                   std::to_string(threads));
  }
  const size_t useful = std::max<size_t>(1, count / kMinElementsPerThread);
  const size_t t = std::min<size_t>(static_cast<size_t>(threads), useful);
  char* bytes = static_cast<char*>(out);
  const size_t elementBytes = dataTypeSize(spec.type);
  if (t <= 1) {
    fillRange(key, spec, offset, count, out);
    return Status::ok();
  }
  // Contiguous shares, each a multiple of 4 elements but the last; the values do not depend on it.
  const size_t share = (count / t + 3) / 4 * 4;
  std::vector<std::thread> workers;
  for (size_t w = 0; w < t; ++w) {
    const size_t begin = std::min(count, w * share);
    const size_t end = w + 1 == t ? count : std::min(count, begin + share);
    if (begin == end) continue;
    auto work = [&, begin, end] {
      fillRange(key, spec, offset + begin, end - begin, bytes + begin * elementBytes);
    };
    try {
      workers.emplace_back(work);
    } catch (const std::system_error&) {
      work();  // no thread to be had: this share runs here, with the same bits
    }
  }
  for (std::thread& worker : workers) worker.join();
  return Status::ok();
}

}  // namespace detcoll::kernels::rng
