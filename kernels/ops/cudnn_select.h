#pragma once

// cuDNN without its nondeterminism: the convolution algorithms cuDNN reports as deterministic
// for a problem (forward, backward data, backward filter), and max-pooling backward in cuDNN's
// deterministic max mode. cuDNN's autotuner picks the fastest algorithm it measures, which may be
// one that accumulates with atomics (different bits each run); choosing among these instead keeps
// a convolution's bits fixed for a given algorithm, problem and device. Built when cuDNN is
// found (library detcoll_cudnn); handles and pointers are the caller's, device memory.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::kernels::ops::cudnn {

// A 2-D convolution, NCHW input [n, c, h, w], filter [k, c / groups, r, s].
struct ConvProblem {
  DataType type = DataType::kFloat32;  // float32, float64, float16 or bfloat16
  int n = 1, c = 1, h = 1, w = 1;
  int k = 1, r = 1, s = 1;
  int padH = 0, padW = 0, strideH = 1, strideW = 1, dilationH = 1, dilationW = 1;
  int groups = 1;
};

enum class ConvDirection { kForward, kBackwardData, kBackwardFilter };

struct ConvAlgorithm {
  int algorithm = 0;     // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  size_t workspace = 0;  // bytes
  bool tensorOps = false;
};

// The algorithms cuDNN's heuristics offer for the problem that cuDNN marks deterministic and
// supports, in its order of preference; every engine cuDNN marks nondeterministic is left out.
// `handle` is a cudnnHandle_t. An empty list is not an error (nothing deterministic fits).
Status deterministicConvolutionAlgorithms(void* handle, const ConvProblem& problem,
                                          ConvDirection direction,
                                          std::vector<ConvAlgorithm>* algorithms);

// dx of 2-D max pooling (NCHW [n, c, h, w] -> [n, c, outH, outW], from x, y and dy) with
// CUDNN_POOLING_MAX_DETERMINISTIC; dx is overwritten.
struct PoolProblem {
  DataType type = DataType::kFloat32;
  int n = 1, c = 1, h = 1, w = 1;
  int windowH = 1, windowW = 1, padH = 0, padW = 0, strideH = 1, strideW = 1;
};
Status maxPoolBackward(void* handle, const PoolProblem& problem, const void* x, const void* y,
                       const void* dy, void* dx);

}  // namespace detcoll::kernels::ops::cudnn
