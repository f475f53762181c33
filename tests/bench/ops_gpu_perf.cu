// The deterministic ops on the GPU beside the atomicAdd kernels they replace (the formulation of
// the frameworks' GPU ops: every source adds into its destination with atomicAdd), same inputs,
// one run, float32. Prints the median of the timed repetitions (CUDA events around each call,
// the deterministic op's index check and sort included), the ratio (atomic time / deterministic
// time: the deterministic op's speed as a fraction of the atomic one's) and whether two runs of
// each gave the same bits.
//   detcoll_ops_gpu_perf [-r REPEATS]
//     -r  timed repetitions (default 20)
// Exit status: 0, also when there is no CUDA device (it says so and measures nothing); 2 on a
// CUDA failure or a bad argument.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops/device.h"
#include "kernels/ops/resample.h"
#include "tests/bench/gpu_bench.h"

namespace bench = detcoll::bench;
namespace ops = detcoll::kernels::ops;
using detcoll::DataType;
using detcoll::bench::download;
using detcoll::bench::mustBeOk;

namespace {

template <typename T>
T* upload(const std::vector<T>& host) {
  T* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(host.size(), 1) * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

std::vector<float> randomFloats(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(g);
  return v;
}

std::vector<int64_t> randomIndices(size_t n, int64_t m, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int64_t> pick(0, m - 1);
  std::vector<int64_t> v(n);
  for (int64_t& x : v) x = pick(g);
  return v;
}

// Runs reset + run twice and compares the output's bits.
bool repeatable(const std::function<void()>& reset, const std::function<void()>& run,
                const void* out, size_t bytes) {
  reset();
  run();
  const auto a = download(out, bytes);
  reset();
  run();
  return a == download(out, bytes);
}

unsigned blocksFor(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 1 << 20));
}

// ---- the atomicAdd kernels ----

__global__ void atomicScatter(float* self, const int64_t* index, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{256} + threadIdx.x; i < n; i += int64_t{gridDim.x} * 256) {
    atomicAdd(&self[index[i]], src[i]);
  }
}

// Rows of `columns` values (embedding backward, index_add along dim 0): one thread a value.
__global__ void atomicRows(float* out, const int64_t* index, const float* grad, int64_t rows,
                           int64_t columns) {
  const int64_t n = rows * columns;
  for (int64_t t = blockIdx.x * int64_t{256} + threadIdx.x; t < n; t += int64_t{gridDim.x} * 256) {
    atomicAdd(&out[index[t / columns] * columns + t % columns], grad[t]);
  }
}

// bias_add backward, NHWC [rows, channels]: each thread sums 32 rows of one channel, then one
// atomicAdd.
__global__ void atomicBiasGrad(float* out, const float* grad, int64_t rows, int64_t channels) {
  const int64_t strips = (rows + 31) / 32, n = strips * channels;
  for (int64_t t = blockIdx.x * int64_t{256} + threadIdx.x; t < n; t += int64_t{gridDim.x} * 256) {
    const int64_t strip = t / channels, c = t % channels;
    float s = 0;
    for (int64_t r = strip * 32; r < rows && r < strip * 32 + 32; ++r) s += grad[r * channels + c];
    atomicAdd(&out[c], s);
  }
}

// bilinear backward, align_corners false, no scale factors: each output pixel adds its four
// terms.
__global__ void atomicBilinear(float* gradIn, const float* gradOut, int64_t planes, int64_t ih,
                               int64_t iw, int64_t oh, int64_t ow) {
  const float sh = static_cast<float>(ih) / oh, sw = static_cast<float>(iw) / ow;
  const int64_t n = planes * oh * ow;
  for (int64_t t = blockIdx.x * int64_t{256} + threadIdx.x; t < n; t += int64_t{gridDim.x} * 256) {
    const int64_t p = t / (oh * ow), y = (t / ow) % oh, x = t % ow;
    const float ry = fmaxf(sh * (y + 0.5f) - 0.5f, 0.f), rx = fmaxf(sw * (x + 0.5f) - 0.5f, 0.f);
    const int64_t y0 = min(static_cast<int64_t>(ry), ih - 1),
                  x0 = min(static_cast<int64_t>(rx), iw - 1);
    const int64_t y1 = y0 + (y0 < ih - 1), x1 = x0 + (x0 < iw - 1);
    const float ly = ry - y0, lx = rx - x0, g = gradOut[t];
    float* base = gradIn + p * ih * iw;
    atomicAdd(&base[y0 * iw + x0], (1 - ly) * (1 - lx) * g);
    atomicAdd(&base[y0 * iw + x1], (1 - ly) * lx * g);
    atomicAdd(&base[y1 * iw + x0], ly * (1 - lx) * g);
    atomicAdd(&base[y1 * iw + x1], ly * lx * g);
  }
}

// max-pool backward: each output adds its gradient at its index.
__global__ void atomicMaxPoolBack(float* gradIn, const float* gradOut, const int64_t* indices,
                                  int64_t planes, int64_t inPlane, int64_t outPlane) {
  const int64_t n = planes * outPlane;
  for (int64_t t = blockIdx.x * int64_t{256} + threadIdx.x; t < n; t += int64_t{gridDim.x} * 256) {
    atomicAdd(&gradIn[(t / outPlane) * inPlane + indices[t]], gradOut[t]);
  }
}

struct Row {
  std::string op, shape;
  double det, atomic;
  bool detSame, atomicSame;
};

void print(const std::vector<Row>& rows) {
  std::printf(
      "| op | shape | detcoll ms | atomicAdd ms | atomic/detcoll | detcoll bits equal | atomic "
      "bits equal |\n");
  std::printf("|---|---|---:|---:|---:|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %s | %.3f | %.3f | %.2f | %s | %s |\n", r.op.c_str(), r.shape.c_str(),
                r.det, r.atomic, r.atomic / r.det, r.detSame ? "yes" : "no",
                r.atomicSame ? "yes" : "no");
  }
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 20;
  if (!bench::parseOptions(argc, argv, {{"-r", bench::intAtLeast(&repeats, 1)}}, "[-r REPEATS]")) {
    return bench::kFailureExit;
  }
  if (!bench::haveDevice()) return 0;
  std::printf("device: %s, %d repeats, median times\n\n", bench::deviceName().c_str(), repeats);
  // Median milliseconds of the timed calls of run on the default stream (after one warm-up
  // call), reset before each.
  auto time = [&](const std::function<void()>& reset, const std::function<void()>& run) {
    return bench::medianMs(run, nullptr, repeats, 1, reset);
  };
  std::vector<Row> rows;

  // scatter_add, 10^7 updates into m destinations.
  const int64_t n = 10000000;
  const std::vector<float> src = randomFloats(n, 1);
  float* dSrc = upload(src);
  for (int64_t m : {int64_t{1000}, int64_t{100000}, int64_t{10000000}}) {
    int64_t* dIndex = upload(randomIndices(n, m, 2));
    float* self = upload(std::vector<float>(m, 0.0f));
    auto reset = [&] { CUDA_CHECK(cudaMemset(self, 0, m * sizeof(float))); };
    auto det = [&] {
      mustBeOk(ops::device::scatterAdd(self, {m}, DataType::kFloat32, 0, dIndex, {n}, dSrc, {n},
                                       nullptr));
    };
    auto atomic = [&] { atomicScatter<<<blocksFor(n), 256>>>(self, dIndex, dSrc, n); };
    rows.push_back({"scatter_add", "1e7 updates into " + std::to_string(m), time(reset, det),
                    time(reset, atomic), repeatable(reset, det, self, m * 4),
                    repeatable(reset, atomic, self, m * 4)});
    CUDA_CHECK(cudaFree(dIndex));
    CUDA_CHECK(cudaFree(self));
  }

  {  // embedding backward: 2^18 lookups of 256 columns into 50000 rows
    const int64_t count = 1 << 18, dim = 256, vocab = 50000;
    int64_t* dIdx = upload(randomIndices(count, vocab, 3));
    float* dGrad = upload(randomFloats(count * dim, 4));
    float* out = upload(std::vector<float>(vocab * dim, 0.0f));
    auto reset = [&] { CUDA_CHECK(cudaMemset(out, 0, vocab * dim * sizeof(float))); };
    auto det = [&] {
      mustBeOk(ops::device::embeddingBackward(out, vocab, DataType::kFloat32, dGrad, count, dim,
                                              dIdx, -1, false, nullptr));
    };
    auto atomic = [&] {
      atomicRows<<<blocksFor(count * dim), 256>>>(out, dIdx, dGrad, count, dim);
    };
    rows.push_back({"embedding backward", "2^18 x 256 into 50000 rows", time(reset, det),
                    time(reset, atomic), repeatable(reset, det, out, vocab * dim * 4),
                    repeatable(reset, atomic, out, vocab * dim * 4)});
    CUDA_CHECK(cudaFree(dIdx));
    CUDA_CHECK(cudaFree(dGrad));
    CUDA_CHECK(cudaFree(out));
  }

  {  // bias_add backward, NHWC [32, 56, 56, 256]
    const int64_t rowsCount = 32 * 56 * 56, channels = 256;
    float* dGrad = upload(randomFloats(rowsCount * channels, 5));
    float* out = upload(std::vector<float>(channels, 0.0f));
    auto reset = [&] { CUDA_CHECK(cudaMemset(out, 0, channels * sizeof(float))); };
    auto det = [&] {
      mustBeOk(ops::device::biasAddGrad(dGrad, {32, 56, 56, channels}, DataType::kFloat32, false,
                                        out, nullptr));
    };
    auto atomic = [&] {
      atomicBiasGrad<<<blocksFor(((rowsCount + 31) / 32) * channels), 256>>>(out, dGrad, rowsCount,
                                                                             channels);
    };
    rows.push_back({"bias_add backward", "NHWC [32, 56, 56, 256]", time(reset, det),
                    time(reset, atomic), repeatable(reset, det, out, channels * 4),
                    repeatable(reset, atomic, out, channels * 4)});
    CUDA_CHECK(cudaFree(dGrad));
    CUDA_CHECK(cudaFree(out));
  }

  {  // bilinear backward, [32 x 64] planes of 56 x 56 upsampled to 112 x 112
    ops::Bilinear s;
    s.planes = 32 * 64;
    s.inHeight = s.inWidth = 56;
    s.outHeight = s.outWidth = 112;
    float* dGrad = upload(randomFloats(s.planes * 112 * 112, 6));
    float* out = upload(std::vector<float>(s.planes * 56 * 56, 0.0f));
    const size_t bytes = s.planes * 56 * 56 * sizeof(float);
    auto reset = [&] { CUDA_CHECK(cudaMemset(out, 0, bytes)); };
    auto det = [&] {
      mustBeOk(ops::device::bilinear2dBackward(out, dGrad, DataType::kFloat32, s, nullptr));
    };
    auto atomic = [&] {
      atomicBilinear<<<blocksFor(s.planes * 112 * 112), 256>>>(out, dGrad, s.planes, 56, 56, 112,
                                                               112);
    };
    rows.push_back({"bilinear backward", "[32, 64, 56, 56] -> 112 x 112", time(reset, det),
                    time(reset, atomic), repeatable(reset, det, out, bytes),
                    repeatable(reset, atomic, out, bytes)});
    CUDA_CHECK(cudaFree(dGrad));
    CUDA_CHECK(cudaFree(out));
  }

  {  // max-pool backward, [32, 64, 112, 112], 3 x 3, stride 2, padding 1
    ops::Pool2d p;
    p.planes = 32 * 64;
    p.inHeight = p.inWidth = 112;
    p.kernelHeight = p.kernelWidth = 3;
    p.strideHeight = p.strideWidth = 2;
    p.padHeight = p.padWidth = 1;
    int64_t oh = 0, ow = 0;
    mustBeOk(ops::pool2dOutputSize(p, &oh, &ow));
    float* dIn = upload(randomFloats(p.planes * 112 * 112, 7));
    float* dGrad = upload(randomFloats(p.planes * oh * ow, 8));
    float* pooled = upload(std::vector<float>(p.planes * oh * ow));
    int64_t* dIdx = upload(std::vector<int64_t>(p.planes * oh * ow));
    mustBeOk(ops::device::maxPool2d(pooled, dIdx, dIn, DataType::kFloat32, p, nullptr));
    float* out = upload(std::vector<float>(p.planes * 112 * 112, 0.0f));
    const size_t bytes = p.planes * 112 * 112 * sizeof(float);
    auto reset = [&] { CUDA_CHECK(cudaMemset(out, 0, bytes)); };
    auto det = [&] {
      mustBeOk(ops::device::maxPool2dBackward(out, dGrad, dIdx, DataType::kFloat32, p, nullptr));
    };
    auto atomic = [&] {
      atomicMaxPoolBack<<<blocksFor(p.planes * oh * ow), 256>>>(out, dGrad, dIdx, p.planes,
                                                                112 * 112, oh * ow);
    };
    rows.push_back({"max_pool2d backward", "[32, 64, 112, 112], 3x3 s2 p1", time(reset, det),
                    time(reset, atomic), repeatable(reset, det, out, bytes),
                    repeatable(reset, atomic, out, bytes)});
    for (void* q : {static_cast<void*>(dIn), static_cast<void*>(dGrad), static_cast<void*>(pooled),
                    static_cast<void*>(dIdx), static_cast<void*>(out)}) {
      CUDA_CHECK(cudaFree(q));
    }
  }
  CUDA_CHECK(cudaFree(dSrc));
  print(rows);
  return 0;
}
