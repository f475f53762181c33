#pragma once

// Fills: out[j] = element (offset + j) of a key's stream, for j < count, under one of the
// distributions of distributions.h. Each element is a pure function of (key, its index,
// parameters), so a range gives the same bits however it is split into calls, chunks or threads,
// and on the host or the device.

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/rng/key.h"

namespace detcoll::kernels::rng {

enum class Distribution : int { kUniform = 0, kNormal = 1, kBernoulli = 2, kRandint = 3 };

std::string distributionName(Distribution distribution);

struct FillSpec {
  Distribution distribution = Distribution::kUniform;
  DataType type = DataType::kFloat32;
  double mean = 0.0;    // normal
  double stddev = 1.0;  // normal
  double p = 0.5;       // bernoulli: probability of 1
  uint64_t n = 1;       // randint: values in [0, n)
};

// The checks every fill makes: the dtype the distribution supports (uniform and normal: float32,
// float64; bernoulli: any, writing 0 or 1; randint: int32 with n <= 2^31, int64 with n <= 2^63),
// finite parameters, p in [0, 1], n >= 1, out non-null and aligned to the dtype when count > 0,
// and the element range
// inside the stream (offset + count below 2^64, at most 2^48 for randint). `what` starts the
// message.
Status checkFill(const char* what, const FillSpec& spec, uint64_t offset, size_t count,
                 const void* out);

// The CPU fill, on `threads` threads (1 or more; small fills use fewer).
Status fillHost(const Key& key, const FillSpec& spec, uint64_t offset, size_t count, void* out,
                int threads = 1);

// words[4 j + w] = word w of block (firstBlock + j) of the key's stream, for j < blocks. The
// batched Philox behind the CPU fills (vectorized where the CPU allows).
void streamBlocks(const Key& key, uint64_t firstBlock, size_t blocks, uint32_t* words);

}  // namespace detcoll::kernels::rng
