// The allreduce kernels of the GPU data path (kernels/reduce_device.h) beside the device-to-device
// copy of the same buffer, the bound every memory-bound kernel is measured against: same device,
// same run. For each size (the bytes of one input), the median of the timed repetitions (CUDA
// events around each call, after warm-up calls) of
//   copy      cudaMemcpyAsync device to device                 read 1, write 1 buffer
//   fold      foldRankOrder, P = 2, 4, 8 float32 and bfloat16  read P, write 1
//   keys      localMaxKeys, P = 4 float32 leaves               read 4, write 1-byte keys
//   encode    encodeLeaves, one float32 leaf                   read the leaf and its keys, write
//   int64 decode    decodeSums, P = 4 int64 pieces to float32        read 4 pieces and keys, write
//   1 invariant invariantReduceLocal, P = 4 float32 leaves       read 4, write 1
// with the effective bandwidth (bytes read + written) / time, the copy's beside it, and their
// ratio. The goal: fold, encode and decode at >= 80% of the copy's bandwidth at 256 MiB (aim
// 90%); each of their rows says PASS or BELOW for 80%. Inputs are random non-integer float32 and
// bfloat16 values over a wide exponent range, with zeros. Every kernel's result is checked once
// per verified size against the CPU reference (kernels/fold.h, kernels/fixed_point.h) on the same
// buffers, and #wrong counts the differing elements, as nccl-tests does.
//
//   detcoll_reduce_gpu_perf [-b BYTES] [-r REPEATS] [-w WARMUPS] [-v VERIFY_BYTES]
//     -b  one size instead of 1, 16, 64 and 256 MiB (a K, M or G suffix multiplies by 2^10...)
//     -r  timed repetitions (default 20), -w warm-up calls (default 3)
//     -v  verify the sizes up to this many bytes (default 64 MiB; the smallest size always)
// Exit status: 0 when every verified result is right (BELOW rows included: a benchmark, not a
// test) and when there is no CUDA device (it says so and measures nothing); 1 when some #wrong
// is not 0; 2 on a CUDA failure or a bad argument.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/fixed_point.h"
#include "kernels/fold.h"
#include "kernels/reduce_device.h"
#include "tests/bench/gpu_bench.h"

using detcoll::DataType;
using detcoll::ReduceOp;
using detcoll::bench::download;
using detcoll::bench::mustBeOk;
namespace bench = detcoll::bench;
namespace device = detcoll::kernels::device;

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGoalBytes = 256 * kMiB;
constexpr double kThreshold = 0.80;
constexpr double kAim = 0.90;
constexpr int kMaxInputs = 8;

__host__ __device__ inline uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Random values of a float format with `exponentBits` and `mantissaBits`: either sign, biased
// exponent within 20 binades of 1, random fraction bits (so almost never integers), 1/64 zeros.
__global__ void fillWide(void* out, size_t n, uint64_t seed, int bytes, int exponentBits,
                         int mantissaBits) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const uint32_t bias = (1u << (exponentBits - 1)) - 1;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint64_t r = mix(seed ^ mix(i));
    const uint32_t sign = static_cast<uint32_t>(r >> 63) << (exponentBits + mantissaBits);
    const uint32_t exponent = bias - 20 + static_cast<uint32_t>((r >> 32) % 40);
    const uint32_t fraction = static_cast<uint32_t>(r) & ((1u << mantissaBits) - 1);
    const bool zero = ((r >> 40) & 63) == 0;
    const uint32_t bits = zero ? sign : sign | (exponent << mantissaBits) | fraction;
    if (bytes == 4) {
      static_cast<uint32_t*>(out)[i] = bits;
    } else {
      static_cast<uint16_t*>(out)[i] = static_cast<uint16_t>(bits);
    }
  }
}

void fill(void* out, size_t n, DataType type, uint64_t seed) {
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 65536));
  if (type == DataType::kFloat32) {
    fillWide<<<blocks, 256>>>(out, n, seed, 4, 8, 23);
  } else {
    fillWide<<<blocks, 256>>>(out, n, seed, 2, 8, 7);  // bfloat16
  }
  CUDA_CHECK(cudaGetLastError());
}

template <typename T = uint8_t>
T* deviceAlloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
  return static_cast<T*>(p);
}

// Elements whose `es` bytes differ.
long wrongElements(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, size_t es) {
  long wrong = 0;
  const size_t n = std::min(got.size(), want.size()) / es;
  for (size_t i = 0; i < n; ++i) {
    wrong += std::memcmp(got.data() + i * es, want.data() + i * es, es) != 0;
  }
  return wrong + static_cast<long>((std::max(got.size(), want.size()) - n * es) / es);
}

std::vector<const void*> pointersOf(const std::vector<std::vector<uint8_t>>& buffers, int k) {
  std::vector<const void*> out;
  for (int j = 0; j < k; ++j) out.push_back(buffers[j].data());
  return out;
}

struct Row {
  size_t bytes;
  std::string kernel, type;
  int p;
  double moved;  // bytes read + written per call
  double us;
  double copyUs;
  bool goal;   // fold, encode, decode: measured against the 80% threshold
  long wrong;  // -1: not verified at this size
};

std::string sizeName(size_t bytes) {
  char text[32];
  if (bytes % kMiB == 0) {
    std::snprintf(text, sizeof(text), "%zu MiB", bytes / kMiB);
  } else if (bytes % 1024 == 0) {
    std::snprintf(text, sizeof(text), "%zu KiB", bytes / 1024);
  } else {
    std::snprintf(text, sizeof(text), "%zu B", bytes);
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 20, warmups = 3;
  size_t verifyBytes = 64 * kMiB;
  std::vector<size_t> sizes = {1 * kMiB, 16 * kMiB, 64 * kMiB, 256 * kMiB};
  const auto oneSize = [&](const char* text) {
    size_t b = 0;
    if (!bench::parseBytes(text, &b)) return false;
    sizes = {b};
    return true;
  };
  const auto verifyUpTo = [&](const char* text) { return bench::parseBytes(text, &verifyBytes); };
  if (!bench::parseOptions(argc, argv,
                           {{"-b", oneSize},
                            {"-v", verifyUpTo},
                            {"-r", bench::intAtLeast(&repeats, 1)},
                            {"-w", bench::intAtLeast(&warmups, 0)}},
                           "[-b BYTES[K|M|G]] [-r REPEATS] [-w WARMUPS] [-v VERIFY_BYTES]")) {
    return bench::kFailureExit;
  }
  // Every size a multiple of 16 bytes, so that every kernel has whole float32/bfloat16 elements.
  for (size_t& s : sizes) s = std::max<size_t>(16, s / 16 * 16);

  if (!bench::haveDevice()) return 0;
  std::printf("device: %s, %d repetitions after %d warm-up calls, median times\n\n",
              bench::deviceName().c_str(), repeats, warmups);

  const size_t maxBytes = *std::max_element(sizes.begin(), sizes.end());
  const size_t minBytes = *std::min_element(sizes.begin(), sizes.end());
  const size_t maxN32 = maxBytes / 4;
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* const onStream = stream;  // the cudaStream_t as the kernels take it

  // Inputs at the largest size (smaller sizes use their first elements): 8 float32 and 8
  // bfloat16 inputs, the output, the copy's destination, keys and 4 int64 pieces.
  std::vector<void*> f32(kMaxInputs), bf16(kMaxInputs);
  for (int j = 0; j < kMaxInputs; ++j) {
    f32[j] = deviceAlloc(maxBytes);
    bf16[j] = deviceAlloc(maxBytes);
    fill(f32[j], maxBytes / 4, DataType::kFloat32, 1000 + j);
    fill(bf16[j], maxBytes / 2, DataType::kBFloat16, 2000 + j);
  }
  void* out = deviceAlloc(maxBytes);
  void* copy = deviceAlloc(maxBytes);
  uint8_t* keys = deviceAlloc(maxN32);
  std::vector<int64_t*> pieces(4);
  for (int64_t*& piece : pieces) piece = deviceAlloc<int64_t>(maxN32 * sizeof(int64_t));
  CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<Row> rows;
  bool anyWrong = false;
  for (size_t bytes : sizes) {
    const size_t n32 = bytes / 4, n16 = bytes / 2;
    const double s = static_cast<double>(bytes);
    const bool verify = bytes <= verifyBytes || bytes == minBytes;
    auto time = [&](const std::function<void()>& run) {  // microseconds
      return 1000.0 * bench::medianMs(run, stream, repeats, warmups);
    };
    const std::vector<const void*> f32In(f32.begin(), f32.end()), bf16In(bf16.begin(), bf16.end());
    const std::vector<const int64_t*> pieceIn(pieces.begin(), pieces.end());

    const double copyUs = time([&] {
      CUDA_CHECK(cudaMemcpyAsync(copy, f32[0], bytes, cudaMemcpyDeviceToDevice, stream));
    });
    long copyWrong = -1;
    if (verify) {
      CUDA_CHECK(cudaStreamSynchronize(stream));
      copyWrong = wrongElements(download(copy, bytes), download(f32[0], bytes), 1);
    }
    rows.push_back({bytes, "copy (peer)", "bytes", 0, 2 * s, copyUs, copyUs, false, copyWrong});

    // Host copies of the inputs, for the CPU references of the verified sizes.
    std::vector<std::vector<uint8_t>> hostF32, hostBf16;
    if (verify) {
      for (int j = 0; j < kMaxInputs; ++j) {
        hostF32.push_back(download(f32[j], bytes));
        hostBf16.push_back(download(bf16[j], bytes));
      }
    }

    for (DataType type : {DataType::kFloat32, DataType::kBFloat16}) {
      const bool isF32 = type == DataType::kFloat32;
      const size_t n = isF32 ? n32 : n16;
      const std::vector<const void*>& in = isF32 ? f32In : bf16In;
      for (int p : {2, 4, 8}) {
        const double us = time([&] {
          mustBeOk(device::foldRankOrder(out, in.data(), p, n, type, ReduceOp::kSum, 1, onStream));
        });
        long wrong = -1;
        if (verify) {
          std::vector<uint8_t> want(bytes);
          detcoll::kernels::foldRankOrder(want.data(),
                                          pointersOf(isF32 ? hostF32 : hostBf16, p).data(), p, n,
                                          type, ReduceOp::kSum, 1);
          CUDA_CHECK(cudaStreamSynchronize(stream));
          wrong = wrongElements(download(out, bytes), want, isF32 ? 4 : 2);
        }
        rows.push_back({bytes, "fold", isF32 ? "float32" : "bfloat16", p, (p + 1) * s, us, copyUs,
                        true, wrong});
      }
    }

    // The invariant codec on float32: keys over 4 leaves, then each leaf's encoding on them.
    {
      const double us = time([&] {
        mustBeOk(device::localMaxKeys(keys, f32In.data(), 4, n32, DataType::kFloat32, onStream));
      });
      long wrong = -1;
      std::vector<uint8_t> hostKeys;
      if (verify) {
        hostKeys.resize(n32);
        detcoll::kernels::localMaxKeys(hostKeys.data(), pointersOf(hostF32, 4).data(), 4, 0, n32,
                                       DataType::kFloat32);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        wrong = wrongElements(download(keys, n32), hostKeys, 1);
      }
      rows.push_back({bytes, "keys", "float32", 4, 4 * s + n32, us, copyUs, false, wrong});

      // Every piece encoded once (the decode's input); piece 0's encoding timed.
      for (int j = 0; j < 4; ++j) {
        mustBeOk(
            device::encodeLeaves(pieces[j], &f32In[j], 1, keys, n32, DataType::kFloat32, onStream));
      }
      const double encodeUs = time([&] {
        mustBeOk(
            device::encodeLeaves(pieces[0], &f32In[0], 1, keys, n32, DataType::kFloat32, onStream));
      });
      std::vector<std::vector<int64_t>> hostPieces;
      wrong = -1;
      if (verify) {
        // The data has no inf or NaN, so the encodings are the CPU's exactly.
        wrong = 0;
        CUDA_CHECK(cudaStreamSynchronize(stream));
        for (int j = 0; j < 4; ++j) {
          hostPieces.emplace_back(n32);
          const void* leaf = hostF32[j].data();
          detcoll::kernels::encodeLeaves(hostPieces[j].data(), &leaf, 1, hostKeys.data(), 0, n32,
                                         DataType::kFloat32);
          std::vector<uint8_t> want(n32 * 8);
          std::memcpy(want.data(), hostPieces[j].data(), want.size());
          wrong += wrongElements(download(pieces[j], n32 * 8), want, 8);
        }
      }
      rows.push_back(
          {bytes, "encode", "float32", 1, s + n32 + 2 * s, encodeUs, copyUs, true, wrong});

      const double decodeUs = time([&] {
        mustBeOk(device::decodeSums(out, pieceIn.data(), 4, keys, n32, DataType::kFloat32,
                                    ReduceOp::kSum, 4, onStream));
      });
      wrong = -1;
      if (verify) {
        std::vector<const int64_t*> hostPieceIn;
        for (const auto& piece : hostPieces) hostPieceIn.push_back(piece.data());
        std::vector<uint8_t> want(bytes);
        detcoll::kernels::decodeSums(want.data(), hostPieceIn.data(), 4, hostKeys.data(), n32,
                                     DataType::kFloat32, ReduceOp::kSum, 4);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        wrong = wrongElements(download(out, bytes), want, 4);
      }
      rows.push_back(
          {bytes, "decode", "float32", 4, 4 * 2 * s + n32 + s, decodeUs, copyUs, true, wrong});

      const double invariantUs = time([&] {
        mustBeOk(device::invariantReduceLocal(out, f32In.data(), 4, n32, DataType::kFloat32,
                                              ReduceOp::kSum, onStream));
      });
      wrong = -1;
      if (verify) {
        std::vector<uint8_t> want(bytes);
        detcoll::kernels::invariantReduceLocal(want.data(), pointersOf(hostF32, 4).data(), 4, n32,
                                               DataType::kFloat32, ReduceOp::kSum);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        wrong = wrongElements(download(out, bytes), want, 4);
      }
      rows.push_back(
          {bytes, "invariant local", "float32", 4, 5 * s, invariantUs, copyUs, false, wrong});
    }
  }

  std::printf(
      "| size | kernel | dtype | P | time us | GB/s | copy us | copy GB/s | of copy | "
      ">= 80%% | #wrong |\n");
  std::printf("|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|\n");
  const size_t goalBytes =
      std::find(sizes.begin(), sizes.end(), kGoalBytes) != sizes.end() ? kGoalBytes : maxBytes;
  double worst = 1e9, best = 0;
  for (const Row& r : rows) {
    const double bw = r.moved / (r.us * 1e3);  // GB/s
    const double copyBw = 2.0 * r.bytes / (r.copyUs * 1e3);
    const double ratio = bw / copyBw;
    const std::string wrong = r.wrong < 0 ? "-" : std::to_string(r.wrong);
    const std::string p = r.p > 0 ? std::to_string(r.p) : "-";
    std::printf("| %s | %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.0f%% | %s | %s |\n",
                sizeName(r.bytes).c_str(), r.kernel.c_str(), r.type.c_str(), p.c_str(), r.us, bw,
                r.copyUs, copyBw, 100 * ratio,
                r.goal ? (ratio >= kThreshold ? "PASS" : "BELOW") : "", wrong.c_str());
    anyWrong = anyWrong || r.wrong > 0;
    if (r.goal && r.bytes == goalBytes) {
      worst = std::min(worst, ratio);
      best = std::max(best, ratio);
    }
  }
  std::printf(
      "\n# effective bandwidth: (bytes read + bytes written) / median time; the copy "
      "moves 2 x size.\n");
  if (best > 0) {
    std::printf(
        "# at %s fold, encode and decode run at %.0f%% to %.0f%% of the copy's bandwidth: "
        "%s the 80%% goal%s\n",
        sizeName(goalBytes).c_str(), 100 * worst, 100 * best,
        worst >= kThreshold ? "all meet" : "not all meet",
        worst >= kAim ? ", and the 90% aim" : "");
  }
  std::printf(
      "# #wrong: elements that differ from the CPU reference (- : not verified at this "
      "size); %s\n",
      anyWrong ? "SOME RESULTS ARE WRONG" : "none wrong");

  for (void* p : f32) CUDA_CHECK(cudaFree(p));
  for (void* p : bf16) CUDA_CHECK(cudaFree(p));
  for (int64_t* p : pieces) CUDA_CHECK(cudaFree(p));
  CUDA_CHECK(cudaFree(out));
  CUDA_CHECK(cudaFree(copy));
  CUDA_CHECK(cudaFree(keys));
  CUDA_CHECK(cudaStreamDestroy(stream));
  return anyWrong ? 1 : 0;
}
