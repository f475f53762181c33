#include "kernels/ops/cudnn_select.h"

#include <cudnn.h>

#include <string>

namespace detcoll::kernels::ops::cudnn {
namespace {

Status check(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return Status::ok();
  return Status::backend(std::string(what) + " failed: " + cudnnGetErrorString(s));
}

Status dataType(DataType type, cudnnDataType_t* data, cudnnDataType_t* compute) {
  switch (type) {
    case DataType::kFloat32:
      *data = *compute = CUDNN_DATA_FLOAT;
      return Status::ok();
    case DataType::kFloat64:
      *data = *compute = CUDNN_DATA_DOUBLE;
      return Status::ok();
    case DataType::kFloat16:
      *data = CUDNN_DATA_HALF;
      *compute = CUDNN_DATA_FLOAT;
      return Status::ok();
    case DataType::kBFloat16:
      *data = CUDNN_DATA_BFLOAT16;
      *compute = CUDNN_DATA_FLOAT;
      return Status::ok();
    default:
      return Status::invalidArgument("cudnn: tensors are floating point, not " +
                                     dataTypeName(type));
  }
}

// The descriptors of one problem, destroyed with it.
class Descriptors {
 public:
  Descriptors() {
    cudnnCreateTensorDescriptor(&x);
    cudnnCreateTensorDescriptor(&y);
    cudnnCreateFilterDescriptor(&filter);
    cudnnCreateConvolutionDescriptor(&conv);
  }
  ~Descriptors() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(filter);
    cudnnDestroyConvolutionDescriptor(conv);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  Status set(const ConvProblem& p) {
    if (p.groups < 1 || p.c % p.groups != 0 || p.k % p.groups != 0) {
      return Status::invalidArgument("cudnn: " + std::to_string(p.groups) +
                                     " groups do not divide the channels " + std::to_string(p.c) +
                                     " and filters " + std::to_string(p.k));
    }
    cudnnDataType_t data, compute;
    DETCOLL_RETURN_IF_ERROR(dataType(p.type, &data, &compute));
    DETCOLL_RETURN_IF_ERROR(
        check(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, data, p.n, p.c, p.h, p.w),
              "cudnnSetTensor4dDescriptor (input)"));
    DETCOLL_RETURN_IF_ERROR(check(
        cudnnSetFilter4dDescriptor(filter, data, CUDNN_TENSOR_NCHW, p.k, p.c / p.groups, p.r, p.s),
        "cudnnSetFilter4dDescriptor"));
    DETCOLL_RETURN_IF_ERROR(check(
        cudnnSetConvolution2dDescriptor(conv, p.padH, p.padW, p.strideH, p.strideW, p.dilationH,
                                        p.dilationW, CUDNN_CROSS_CORRELATION, compute),
        "cudnnSetConvolution2dDescriptor"));
    DETCOLL_RETURN_IF_ERROR(
        check(cudnnSetConvolutionGroupCount(conv, p.groups), "cudnnSetConvolutionGroupCount"));
    int n = 0, c = 0, h = 0, w = 0;
    DETCOLL_RETURN_IF_ERROR(
        check(cudnnGetConvolution2dForwardOutputDim(conv, x, filter, &n, &c, &h, &w),
              "cudnnGetConvolution2dForwardOutputDim"));
    return check(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, data, n, c, h, w),
                 "cudnnSetTensor4dDescriptor (output)");
  }

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

// Keeps the deterministic, supported entries of a perf list.
template <typename Perf>
void keep(const Perf* perf, int count, std::vector<ConvAlgorithm>* out) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC) {
      continue;
    }
    out->push_back(
        {static_cast<int>(perf[i].algo), perf[i].memory, perf[i].mathType != CUDNN_DEFAULT_MATH});
  }
}

}  // namespace

Status deterministicConvolutionAlgorithms(void* handle, const ConvProblem& problem,
                                          ConvDirection direction,
                                          std::vector<ConvAlgorithm>* algorithms) {
  if (handle == nullptr || algorithms == nullptr) {
    return Status::invalidArgument("cudnn: the handle or the result is null");
  }
  auto h = static_cast<cudnnHandle_t>(handle);
  Descriptors d;
  DETCOLL_RETURN_IF_ERROR(d.set(problem));
  algorithms->clear();
  int count = 0;
  switch (direction) {
    case ConvDirection::kForward: {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      DETCOLL_RETURN_IF_ERROR(
          check(cudnnGetConvolutionForwardAlgorithm_v7(
                    h, d.x, d.filter, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
                "cudnnGetConvolutionForwardAlgorithm_v7"));
      keep(perf, count, algorithms);
      break;
    }
    case ConvDirection::kBackwardData: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      DETCOLL_RETURN_IF_ERROR(check(
          cudnnGetConvolutionBackwardDataAlgorithm_v7(
              h, d.filter, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
          "cudnnGetConvolutionBackwardDataAlgorithm_v7"));
      keep(perf, count, algorithms);
      break;
    }
    case ConvDirection::kBackwardFilter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      DETCOLL_RETURN_IF_ERROR(check(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(
              h, d.x, d.y, d.conv, d.filter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf),
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7"));
      keep(perf, count, algorithms);
      break;
    }
  }
  return Status::ok();
}

Status maxPoolBackward(void* handle, const PoolProblem& p, const void* x, const void* y,
                       const void* dy, void* dx) {
  if (handle == nullptr || x == nullptr || y == nullptr || dy == nullptr || dx == nullptr) {
    return Status::invalidArgument("cudnn max-pool backward: a null handle or tensor");
  }
  cudnnDataType_t data, compute;
  DETCOLL_RETURN_IF_ERROR(dataType(p.type, &data, &compute));
  cudnnPoolingDescriptor_t pool = nullptr;
  cudnnTensorDescriptor_t in = nullptr, out = nullptr;
  cudnnCreatePoolingDescriptor(&pool);
  cudnnCreateTensorDescriptor(&in);
  cudnnCreateTensorDescriptor(&out);
  Status status =
      check(cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN,
                                        p.windowH, p.windowW, p.padH, p.padW, p.strideH, p.strideW),
            "cudnnSetPooling2dDescriptor");
  int n = 0, c = 0, h = 0, w = 0;
  if (status.isOk()) {
    status = check(cudnnSetTensor4dDescriptor(in, CUDNN_TENSOR_NCHW, data, p.n, p.c, p.h, p.w),
                   "cudnnSetTensor4dDescriptor (input)");
  }
  if (status.isOk()) {
    status = check(cudnnGetPooling2dForwardOutputDim(pool, in, &n, &c, &h, &w),
                   "cudnnGetPooling2dForwardOutputDim");
  }
  if (status.isOk()) {
    status = check(cudnnSetTensor4dDescriptor(out, CUDNN_TENSOR_NCHW, data, n, c, h, w),
                   "cudnnSetTensor4dDescriptor (output)");
  }
  if (status.isOk()) {
    const double one64 = 1.0, zero64 = 0.0;
    const float one32 = 1.0f, zero32 = 0.0f;
    const bool wide = p.type == DataType::kFloat64;
    const void* alpha = wide ? static_cast<const void*>(&one64) : &one32;
    const void* beta = wide ? static_cast<const void*>(&zero64) : &zero32;
    status = check(cudnnPoolingBackward(static_cast<cudnnHandle_t>(handle), pool, alpha, out, y,
                                        out, dy, in, x, beta, in, dx),
                   "cudnnPoolingBackward");
  }
  cudnnDestroyTensorDescriptor(out);
  cudnnDestroyTensorDescriptor(in);
  cudnnDestroyPoolingDescriptor(pool);
  return status;
}

}  // namespace detcoll::kernels::ops::cudnn
