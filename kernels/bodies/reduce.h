#pragma once

// The allreduce kernels as a data-parallel machine computes them: the rank-order fold, the
// invariant mode's exponent keys, encode and decode, written once as bodies (a body is called
// once per grid index) and launched by kernels/bodies/reduce_kernels.h on an executor: the GPU
// (kernels/device_executor.cuh) or, in the tests, the host one index at a time
// (tests/support/serial_executor.h). Element i of every result depends on element i of the inputs
// only, so the bits are those of the CPU kernels (kernels/fold.h, kernels/fixed_point.h) whatever
// the launch configuration.
//
// Each body call handles one vector: kLanes<T> consecutive elements, 16 bytes of the dtype,
// loaded and stored as one 16-byte access when every buffer is 16-byte aligned; a tail or
// unaligned buffers take the same arithmetic element by element, byte copies where a buffer is not
// even aligned to its element (kernels/unaligned.h: a caller's buffer may start at any byte
// address, and so may a key array). One pass over memory: each
// input is read once and each output written once (the invariant reduction of P dtype pieces
// reads its pieces twice, keys first, then encodings, within one body call).
//
// The invariant mode's encodings carry non-finite values in place, by the codec's one rule
// (codec::kCountBits in kernels/codec.h), as the CPU kernels do.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "common/dtype.h"
#include "common/half.h"
#include "common/host_device.h"
#include "kernels/accumulate.h"
#include "kernels/codec.h"
#include "kernels/combine.h"
#include "kernels/pieces.h"
#include "kernels/unaligned.h"

namespace detcoll::kernels::bodies {

using kernels::kVectorBytes;
template <typename T>
constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(T));

using kernels::Pieces;

template <typename T>
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE void loadLanes(const T* p, T* v) {
#if defined(__CUDA_ARCH__)
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  memcpy(v, &raw, kVectorBytes);
#else
  std::memcpy(v, p, kVectorBytes);
#endif
}

template <typename T>
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE void storeLanes(T* p, const T* v) {
#if defined(__CUDA_ARCH__)
  uint4 raw;
  memcpy(&raw, v, kVectorBytes);
  *reinterpret_cast<uint4*>(p) = raw;
#else
  std::memcpy(p, v, kVectorBytes);
#endif
}

// The lanes of vector v that exist: kLanes, or fewer at the tail.
template <typename T>
DETCOLL_HOST_DEVICE inline int lanesAt(int64_t v, int64_t n) {
  const int64_t left = n - v * kLanes<T>;
  return left < kLanes<T> ? static_cast<int>(left) : kLanes<T>;
}

// Loads lanes [0, m) of piece p's vector starting at element `begin`.
template <typename T>
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE void loadVector(const T* p, int64_t begin, int m,
                                                         bool vectorized, T* x) {
  if (vectorized && m == kLanes<T>) {
    loadLanes(p + begin, x);
  } else {
    for (int l = 0; l < m; ++l) x[l] = loadElement(p, begin + l);
  }
}

template <typename T>
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE void storeVector(T* p, int64_t begin, int m,
                                                          bool vectorized, const T* x) {
  if (vectorized && m == kLanes<T>) {
    storeLanes(p + begin, x);
  } else {
    for (int l = 0; l < m; ++l) storeElement(p, begin + l, x[l]);
  }
}

// The bit pattern of a float storage value, and back.
template <typename T>
DETCOLL_HOST_DEVICE inline uint64_t bitsOf(T v) {
  if constexpr (sizeof(T) == 2) {
    return v.bits;
  } else if constexpr (std::is_same_v<T, float>) {
    return floatBits(v);
  } else {
    return static_cast<uint64_t>(codec::bitsFromDouble(v));
  }
}
template <typename T>
DETCOLL_HOST_DEVICE inline T fromBits(uint64_t b) {
  if constexpr (sizeof(T) == 2) {
    return T{static_cast<uint16_t>(b)};
  } else if constexpr (std::is_same_v<T, float>) {
    return bitsToFloat(static_cast<uint32_t>(b));
  } else {
    return codec::doubleFromBits(b);
  }
}

// The format of a float storage type.
template <typename T>
DETCOLL_HOST_DEVICE inline codec::Format formatFor() {
  if constexpr (std::is_same_v<T, double>) {
    return codec::formatOf(DataType::kFloat64);
  } else if constexpr (std::is_same_v<T, Half>) {
    return codec::formatOf(DataType::kFloat16);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return codec::formatOf(DataType::kBFloat16);
  } else {
    return codec::formatOf(DataType::kFloat32);
  }
}

// The key type of a float storage type: 1 byte for 8-bit exponents and less, 2 for float64.
template <typename T>
using KeyOf = std::conditional_t<std::is_same_v<T, double>, uint16_t, uint8_t>;

// ---- bodies ------------------------------------------------------------------------------------

// out = finish(fold of k pieces in order), kernels/fold.h. out may alias a piece exactly.
template <typename T, typename Op, bool kAverage>
struct FoldBody {
  using A = typename Traits<T>::Acc;
  Pieces pieces;
  int k;
  T* out;
  int64_t n;
  A divisor;
  bool vectorized;

  DETCOLL_HOST_DEVICE void operator()(int64_t v) const {
    constexpr int W = kLanes<T>;
    const int64_t begin = v * W;
    const int m = lanesAt<T>(v, n);
    T x[W];
    A acc[W];
    loadVector(pieces.at<T>(0), begin, m, vectorized, x);
    for (int l = 0; l < m; ++l) acc[l] = Traits<T>::load(x[l]);
    for (int j = 1; j < k; ++j) {
      loadVector(pieces.at<T>(j), begin, m, vectorized, x);
      for (int l = 0; l < m; ++l) acc[l] = Op::apply(acc[l], Traits<T>::load(x[l]));
    }
    for (int l = 0; l < m; ++l) {
      if constexpr (kAverage) {
        x[l] = Traits<T>::store(acc[l] / divisor);
      } else {
        x[l] = Traits<T>::store(acc[l]);
      }
    }
    storeVector(out, begin, m, vectorized, x);
  }
};

// key[l] = the largest key of lanes [0, m) of the vector at `begin` over k pieces.
template <typename T>
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE void largestKeys(const Pieces& pieces, int k,
                                                          int64_t begin, int m, bool vectorized,
                                                          uint32_t* key) {
  const codec::Format f = formatFor<T>();
  T x[kLanes<T>];
  for (int l = 0; l < m; ++l) key[l] = 0;
  for (int j = 0; j < k; ++j) {
    loadVector(pieces.at<T>(j), begin, m, vectorized, x);
    for (int l = 0; l < m; ++l) {
      const uint32_t kj = codec::keyOf(bitsOf(x[l]), f);
      key[l] = kj > key[l] ? kj : key[l];
    }
  }
}

// keys[i] = the largest key of element i over the leaves (kernels/fixed_point.h localMaxKeys).
template <typename T>
struct KeysBody {
  Pieces leaves;
  int nleaves;
  KeyOf<T>* keys;
  int64_t n;
  bool vectorized;

  DETCOLL_HOST_DEVICE void operator()(int64_t v) const {
    constexpr int W = kLanes<T>;
    const int64_t begin = v * W;
    const int m = lanesAt<T>(v, n);
    uint32_t key[W];
    largestKeys<T>(leaves, nleaves, begin, m, vectorized, key);
    for (int l = 0; l < m; ++l) storeElement(keys, begin + l, static_cast<KeyOf<T>>(key[l]));
  }
};

// out[i] = the largest of p key arrays at i (foldMaxKeys). out may alias a piece.
template <typename K>
struct MaxKeysBody {
  Pieces pieces;
  int p;
  K* out;

  DETCOLL_HOST_DEVICE void operator()(int64_t i) const {
    K key = 0;
    for (int j = 0; j < p; ++j) {
      const K k = loadElement(pieces.at<K>(j), i);
      key = k > key ? k : key;
    }
    storeElement(out, i, key);
  }
};

// sum[l] = the sum over k pieces of lane l's contribution on the grid of key[l]; for integer
// dtypes (key unused) the wrapping sum of the values.
template <typename T>
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE void sumContributions(const Pieces& pieces, int k,
                                                               int64_t begin, int m,
                                                               bool vectorized, const uint32_t* key,
                                                               int64_t* sum) {
  T x[kLanes<T>];
  for (int l = 0; l < m; ++l) sum[l] = 0;
  for (int j = 0; j < k; ++j) {
    loadVector(pieces.at<T>(j), begin, m, vectorized, x);
    for (int l = 0; l < m; ++l) {
      if constexpr (isFloatingStorage<T>()) {
        sum[l] += codec::leafContribution(bitsOf(x[l]), key[l], formatFor<T>());
      } else {
        sum[l] = wrapAdd(sum[l], static_cast<int64_t>(x[l]));
      }
    }
  }
}

// out[i] = the sum over the leaves of their contributions on the grid of keys[i]; integer dtypes
// (keys unused) sum the values, wrapping. encodeLeaves of kernels/fixed_point.h, with the
// non-finite counts carried in place.
template <typename T>
struct EncodeBody {
  Pieces leaves;
  int nleaves;
  const void* keys;
  int64_t* out;
  int64_t n;
  bool vectorized;

  DETCOLL_HOST_DEVICE void operator()(int64_t v) const {
    constexpr int W = kLanes<T>;
    const int64_t begin = v * W;
    const int m = lanesAt<T>(v, n);
    uint32_t key[W] = {};
    if constexpr (isFloatingStorage<T>()) {
      for (int l = 0; l < m; ++l)
        key[l] = loadElement(static_cast<const KeyOf<T>*>(keys), begin + l);
    }
    int64_t sum[W];
    sumContributions<T>(leaves, nleaves, begin, m, vectorized, key, sum);
    for (int l = 0; l < m; ++l) storeElement(out, begin + l, sum[l]);
  }
};

// The dtype value of an element's exact int64 sum (of encodings or integers), divided by `leaves`
// for average, rounded once; under the special key, the non-finite result of the counts.
template <typename T>
DETCOLL_HOST_DEVICE inline T decodeElement(int64_t sum, uint32_t key, bool average,
                                           int64_t leaves) {
  if constexpr (isFloatingStorage<T>()) {
    const codec::Format f = formatFor<T>();
    if constexpr (std::is_same_v<T, float>) {
      // By double arithmetic where that settles the bits (nearly everywhere): no 128-bit
      // division on the hot path.
      if (key != codec::specialKey(f)) {
        bool settled = false;
        const float fast = codec::decodeFloat32(sum, key, average, leaves, &settled);
        if (settled) return fast;
      }
    }
    return fromBits<T>(codec::decodeElement(sum, key, f, average, leaves));
  } else {
    if (average) sum /= leaves;
    return Traits<T>::store(sum);
  }
}

// out[i] = decode(sum of p int64 pieces at i) (kernels::decodeSums). out may alias
// nothing the pieces hold.
template <typename T>
struct DecodeBody {
  Pieces pieces;
  int p;
  const void* keys;
  T* out;
  int64_t n;
  bool average;
  int64_t leaves;
  bool vectorized;

  DETCOLL_HOST_DEVICE void operator()(int64_t v) const {
    constexpr int W = kLanes<T>;
    const int64_t begin = v * W;
    const int m = lanesAt<T>(v, n);
    int64_t sum[W];
    for (int l = 0; l < m; ++l) sum[l] = 0;
    for (int j = 0; j < p; ++j) {
      const int64_t* piece = pieces.at<int64_t>(j);
      for (int l = 0; l < m; ++l) sum[l] = wrapAdd(sum[l], loadElement(piece, begin + l));
    }
    T x[W];
    for (int l = 0; l < m; ++l) {
      uint32_t key = 0;
      if constexpr (isFloatingStorage<T>()) {
        key = loadElement(static_cast<const KeyOf<T>*>(keys), begin + l);
      }
      x[l] = decodeElement<T>(sum[l], key, average, leaves);
    }
    storeVector(out, begin, m, vectorized, x);
  }
};

// out = the invariant reduction of p dtype pieces held here (kernels::invariantReduceLocal for
// sum and average): each element's key over the pieces, the exact sum of their encodings,
// rounded once. out may alias a piece exactly.
template <typename T>
struct InvariantLocalBody {
  Pieces pieces;
  int p;
  T* out;
  int64_t n;
  bool average;
  bool vectorized;

  DETCOLL_HOST_DEVICE void operator()(int64_t v) const {
    constexpr int W = kLanes<T>;
    const int64_t begin = v * W;
    const int m = lanesAt<T>(v, n);
    uint32_t key[W] = {};
    if constexpr (isFloatingStorage<T>()) largestKeys<T>(pieces, p, begin, m, vectorized, key);
    int64_t sum[W];
    sumContributions<T>(pieces, p, begin, m, vectorized, key, sum);
    T x[W];
    for (int l = 0; l < m; ++l) x[l] = decodeElement<T>(sum[l], key[l], average, p);
    storeVector(out, begin, m, vectorized, x);
  }
};

// ---- helpers of the launches ------------------------------------------------------------------

// The number of body calls for n elements of T.
template <typename T>
inline int64_t vectorsOf(int64_t n) {
  return (n + kLanes<T> - 1) / kLanes<T>;
}

}  // namespace detcoll::kernels::bodies
