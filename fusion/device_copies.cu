#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "fusion/device_copies.h"

namespace detcoll::fusion {
namespace {

constexpr int kCopiesPerLaunch = 128;  // the table travels by value: 3 KiB of parameters
constexpr int kThreads = 256;
constexpr int kMaxBlocksPerCopy = 256;

struct CopyTable {
  DeviceCopy copies[kCopiesPerLaunch];
};

template <typename Word>
__device__ void copyWords(const DeviceCopy& c) {
  const Word* src = static_cast<const Word*>(c.src);
  Word* dst = static_cast<Word*>(c.dst);
  const size_t n = c.bytes / sizeof(Word);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = src[i];
  }
}

__global__ void copyMany(CopyTable table, int count) {
  if (static_cast<int>(blockIdx.y) >= count) return;
  const DeviceCopy c = table.copies[blockIdx.y];
  const uintptr_t all =
      reinterpret_cast<uintptr_t>(c.src) | reinterpret_cast<uintptr_t>(c.dst) | c.bytes;
  if (all % 16 == 0) {
    copyWords<uint4>(c);
  } else if (all % 4 == 0) {
    copyWords<uint32_t>(c);
  } else {
    copyWords<unsigned char>(c);
  }
}

}  // namespace

Status copyOnDevice(const std::vector<DeviceCopy>& copies, void* stream) {
  for (size_t first = 0; first < copies.size(); first += kCopiesPerLaunch) {
    const int count = static_cast<int>(std::min<size_t>(kCopiesPerLaunch, copies.size() - first));
    CopyTable table{};
    size_t widest = 0;
    for (int j = 0; j < count; ++j) {
      table.copies[j] = copies[first + j];
      widest = std::max(widest, copies[first + j].bytes);
    }
    const size_t perBlock = static_cast<size_t>(kThreads) * 16;
    const unsigned blocks = static_cast<unsigned>(
        std::clamp<size_t>((widest + perBlock - 1) / perBlock, 1, kMaxBlocksPerCopy));
    copyMany<<<dim3(blocks, static_cast<unsigned>(count)), kThreads, 0,
               static_cast<cudaStream_t>(stream)>>>(table, count);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      return Status::backend(std::string("the fusion buffer's copy kernel failed to launch: ") +
                             cudaGetErrorString(e));
    }
  }
  return Status::ok();
}

}  // namespace detcoll::fusion
