// detcoll._detcoll's deterministic ops and random streams (bindings/python/binding.h).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "binding.h"
#include "detcoll.h"

namespace detcoll_python {
namespace {

detcoll_rng_key_t toKey(const std::vector<uint32_t>& words) {
  if (words.size() != 4) throw py::value_error("a key has 4 32-bit words");
  return detcoll_rng_key_t{{words[0], words[1], words[2], words[3]}};
}
std::vector<uint32_t> fromKey(const detcoll_rng_key_t& key) {
  return {key.words[0], key.words[1], key.words[2], key.words[3]};
}

size_t elementSize(int dtype) {
  switch (dtype) {
    case DETCOLL_FLOAT16:
    case DETCOLL_BFLOAT16:
      return 2;
    case DETCOLL_FLOAT64:
    case DETCOLL_INT64:
      return 8;
    default:
      return 4;
  }
}

// One of the C API's fills, by name: a and b are the parameters (mean and stddev, or p), n the
// bound of randint.
detcoll_status_t fill(const std::string& kind, const detcoll_rng_key_t& key, uint64_t offset,
                      void* out, size_t count, detcoll_dtype_t dtype, double a, double b,
                      uint64_t n) {
  if (kind == "uniform") return detcoll_rng_uniform(&key, offset, out, count, dtype);
  if (kind == "normal") return detcoll_rng_normal(&key, offset, out, count, dtype, a, b);
  if (kind == "bernoulli") return detcoll_rng_bernoulli(&key, offset, out, count, dtype, a);
  return detcoll_rng_randint(&key, offset, out, count, dtype, n);
}

}  // namespace

void defineOps(py::module_& m) {
  // Deterministic ops: addresses and shapes, checked by the library.
  m.def("ops_set_threads", [](int threads) { check(detcoll_ops_set_threads(threads)); });
  m.def("scatter_add", [](uintptr_t self, const std::vector<int64_t>& selfShape, int dtype, int dim,
                          uintptr_t index, const std::vector<int64_t>& indexShape, uintptr_t src,
                          const std::vector<int64_t>& srcShape) {
    if (indexShape.size() != selfShape.size() || srcShape.size() != selfShape.size()) {
      throw py::value_error("scatter_add: shapes of different ranks");
    }
    blocking([&] {
      return detcoll_scatter_add(ptr(self), selfShape.data(), static_cast<int>(selfShape.size()),
                                 static_cast<detcoll_dtype_t>(dtype), dim,
                                 static_cast<const int64_t*>(ptr(index)), indexShape.data(),
                                 ptr(src), srcShape.data());
    });
  });
  m.def("index_add", [](uintptr_t self, const std::vector<int64_t>& selfShape, int dtype, int dim,
                        uintptr_t index, int64_t count, uintptr_t source,
                        const std::vector<int64_t>& sourceShape, double alpha) {
    if (sourceShape.size() != selfShape.size()) {
      throw py::value_error("index_add: shapes of different ranks");
    }
    blocking([&] {
      return detcoll_index_add(ptr(self), selfShape.data(), static_cast<int>(selfShape.size()),
                               static_cast<detcoll_dtype_t>(dtype), dim,
                               static_cast<const int64_t*>(ptr(index)), count, ptr(source),
                               sourceShape.data(), alpha);
    });
  });
  m.def("weighted_scatter",
        [](uintptr_t out, int64_t planes, int64_t outInner, int dtype, uintptr_t destination,
           int64_t n, uintptr_t values, int64_t valuesInner, uintptr_t rows, uintptr_t weights) {
          blocking([&] {
            return detcoll_weighted_scatter(
                ptr(out), planes, outInner, static_cast<detcoll_dtype_t>(dtype),
                static_cast<const int64_t*>(ptr(destination)), n, ptr(values), valuesInner,
                static_cast<const int64_t*>(ptr(rows)), ptr(weights));
          });
        });
  m.def("unsorted_segment_reduce",
        [](uintptr_t out, int64_t segments, int dtype, uintptr_t data,
           const std::vector<int64_t>& dataShape, uintptr_t ids, int idDims, bool mean) {
          blocking([&] {
            return detcoll_unsorted_segment_reduce(
                ptr(out), segments, static_cast<detcoll_dtype_t>(dtype), ptr(data),
                dataShape.data(), static_cast<int>(dataShape.size()),
                static_cast<const int64_t*>(ptr(ids)), idDims, mean ? 1 : 0);
          });
        });
  m.def("embedding_backward", [](uintptr_t gradWeight, int64_t numWeights, int dtype,
                                 uintptr_t gradOutput, int64_t count, int64_t dim,
                                 uintptr_t indices, int64_t paddingIdx, bool byFrequency) {
    blocking([&] {
      return detcoll_embedding_backward(
          ptr(gradWeight), numWeights, static_cast<detcoll_dtype_t>(dtype), ptr(gradOutput), count,
          dim, static_cast<const int64_t*>(ptr(indices)), paddingIdx, byFrequency ? 1 : 0);
    });
  });
  m.def("embedding_bag_backward",
        [](uintptr_t gradWeight, int64_t numWeights, int dtype, uintptr_t gradOutput, int64_t bags,
           int64_t dim, uintptr_t indices, int64_t count, uintptr_t offsets, bool mean,
           uintptr_t weights, int64_t paddingIdx) {
          blocking([&] {
            return detcoll_embedding_bag_backward(
                ptr(gradWeight), numWeights, static_cast<detcoll_dtype_t>(dtype), ptr(gradOutput),
                bags, dim, static_cast<const int64_t*>(ptr(indices)), count,
                static_cast<const int64_t*>(ptr(offsets)), mean ? 1 : 0, ptr(weights), paddingIdx);
          });
        });
  m.def("bincount", [](uintptr_t out, int dtype, uintptr_t input, int64_t count, uintptr_t weights,
                       int64_t minlength) {
    int64_t length = 0;
    blocking([&] {
      return detcoll_bincount(ptr(out), &length, static_cast<detcoll_dtype_t>(dtype),
                              static_cast<const int64_t*>(ptr(input)), count, ptr(weights),
                              minlength);
    });
    return length;
  });

  m.def("sum_over_axes", [](uintptr_t in, const std::vector<int64_t>& shape, int dtype,
                            const std::vector<int>& axes, uintptr_t out) {
    blocking([&] {
      return detcoll_sum_over_axes(ptr(in), shape.data(), static_cast<int>(shape.size()),
                                   static_cast<detcoll_dtype_t>(dtype), axes.data(),
                                   static_cast<int>(axes.size()), ptr(out));
    });
  });
  m.def("bias_add_grad", [](uintptr_t grad, const std::vector<int64_t>& shape, int dtype,
                            bool channelsFirst, uintptr_t out) {
    blocking([&] {
      return detcoll_bias_add_grad(ptr(grad), shape.data(), static_cast<int>(shape.size()),
                                   static_cast<detcoll_dtype_t>(dtype), channelsFirst ? 1 : 0,
                                   ptr(out));
    });
  });

  m.def(
      "upsample_bilinear2d_backward",
      [](uintptr_t gradInput, uintptr_t gradOutput, int dtype, int64_t planes, int64_t inH,
         int64_t inW, int64_t outH, int64_t outW, bool alignCorners, double scaleH, double scaleW) {
        blocking([&] {
          return detcoll_upsample_bilinear2d_backward(
              ptr(gradInput), ptr(gradOutput), static_cast<detcoll_dtype_t>(dtype), planes, inH,
              inW, outH, outW, alignCorners ? 1 : 0, scaleH, scaleW);
        });
      });
  auto pool2d = [](const std::array<int64_t, 2>& kernel, const std::array<int64_t, 2>& stride,
                   const std::array<int64_t, 2>& padding, const std::array<int64_t, 2>& dilation,
                   bool ceilMode) {
    detcoll_pool2d_t p;
    for (int i = 0; i < 2; ++i) {
      p.kernel[i] = kernel[i];
      p.stride[i] = stride[i];
      p.padding[i] = padding[i];
      p.dilation[i] = dilation[i];
    }
    p.ceil_mode = ceilMode ? 1 : 0;
    return p;
  };
  m.def("max_pool2d_output_size",
        [pool2d](int64_t inH, int64_t inW, const std::array<int64_t, 2>& kernel,
                 const std::array<int64_t, 2>& stride, const std::array<int64_t, 2>& padding,
                 const std::array<int64_t, 2>& dilation, bool ceilMode) {
          const detcoll_pool2d_t p = pool2d(kernel, stride, padding, dilation, ceilMode);
          int64_t h = 0, w = 0;
          blocking([&] { return detcoll_max_pool2d_output_size(&p, inH, inW, &h, &w); });
          return std::make_pair(h, w);
        });
  m.def("max_pool2d",
        [pool2d](uintptr_t out, uintptr_t indices, uintptr_t in, int dtype, int64_t planes,
                 int64_t inH, int64_t inW, const std::array<int64_t, 2>& kernel,
                 const std::array<int64_t, 2>& stride, const std::array<int64_t, 2>& padding,
                 const std::array<int64_t, 2>& dilation, bool ceilMode) {
          const detcoll_pool2d_t p = pool2d(kernel, stride, padding, dilation, ceilMode);
          blocking([&] {
            return detcoll_max_pool2d(ptr(out), static_cast<int64_t*>(ptr(indices)), ptr(in),
                                      static_cast<detcoll_dtype_t>(dtype), planes, inH, inW, &p);
          });
        });
  m.def("max_pool2d_backward",
        [pool2d](uintptr_t gradInput, uintptr_t gradOutput, uintptr_t indices, int dtype,
                 int64_t planes, int64_t inH, int64_t inW, const std::array<int64_t, 2>& kernel,
                 const std::array<int64_t, 2>& stride, const std::array<int64_t, 2>& padding,
                 const std::array<int64_t, 2>& dilation, bool ceilMode) {
          const detcoll_pool2d_t p = pool2d(kernel, stride, padding, dilation, ceilMode);
          blocking([&] {
            return detcoll_max_pool2d_backward(
                ptr(gradInput), ptr(gradOutput), static_cast<const int64_t*>(ptr(indices)),
                static_cast<detcoll_dtype_t>(dtype), planes, inH, inW, &p);
          });
        });
}

void defineRandom(py::module_& m) {
  // Seeds and random fills.
  m.def("rng_seed", [](uint64_t seed) { blocking([&] { return detcoll_rng_seed(seed); }); });
  m.def("rng_get_seed", [] {
    uint64_t seed = 0;
    check(detcoll_rng_get_seed(&seed));
    return seed;
  });
  m.def("rng_root_key", [] {
    detcoll_rng_key_t key;
    check(detcoll_rng_root_key(&key));
    return fromKey(key);
  });
  m.def("rng_key_from_seed", [](uint64_t seed) {
    detcoll_rng_key_t key;
    check(detcoll_rng_key_from_seed(seed, &key));
    return fromKey(key);
  });
  m.def("rng_derive", [](const std::vector<uint32_t>& parent, const std::string& domain,
                         const std::vector<uint64_t>& path) {
    const detcoll_rng_key_t p = toKey(parent);
    detcoll_rng_key_t child;
    check(detcoll_rng_derive(&p, domain.c_str(), path.data(), path.size(), &child));
    logDerivation(p, domain, path, child);
    return fromKey(child);
  });
  m.def("rng_begin_step", [](uint64_t step) { check(detcoll_rng_begin_step(step)); });
  m.def("rng_derive_checked", [](const std::vector<uint32_t>& parent, const std::string& domain,
                                 const std::vector<uint64_t>& path, const std::string& purpose) {
    const detcoll_rng_key_t p = toKey(parent);
    detcoll_rng_key_t child;
    check(detcoll_rng_derive_checked(&p, domain.c_str(), path.data(), path.size(), purpose.c_str(),
                                     &child));
    logDerivation(p, domain, path, child);
    return fromKey(child);
  });
  m.def("rng_fill", [](const std::string& kind, const std::vector<uint32_t>& key, uint64_t offset,
                       uintptr_t out, size_t count, int dtype, double a, double b, uint64_t n) {
    const detcoll_rng_key_t k = toKey(key);
    const auto t = static_cast<detcoll_dtype_t>(dtype);
    blocking([&] { return fill(kind, k, offset, ptr(out), count, t, a, b, n); });
  });
  // Row r of a row-major [rows, rowLength] buffer from keys[r], offsets 0 to rowLength - 1: one
  // key per sample (a batch's dropout masks or noise) in one call.
  m.def("rng_fill_rows",
        [](const std::string& kind, const std::vector<std::vector<uint32_t>>& keys, uintptr_t out,
           size_t rowLength, int dtype, double a, double b, uint64_t n) {
          std::vector<detcoll_rng_key_t> k;
          k.reserve(keys.size());
          for (const auto& words : keys) k.push_back(toKey(words));
          const auto t = static_cast<detcoll_dtype_t>(dtype);
          const size_t rowBytes = rowLength * elementSize(dtype);
          blocking([&] {
            for (size_t r = 0; r < k.size(); ++r) {
              void* row = static_cast<char*>(ptr(out)) + r * rowBytes;
              const detcoll_status_t s = fill(kind, k[r], 0, row, rowLength, t, a, b, n);
              if (s != DETCOLL_SUCCESS) return s;
            }
            return DETCOLL_SUCCESS;
          });
        });
  // out[0..n) = a permutation of 0..n-1: Fisher-Yates from the top, position j swapped with
  // element j of the key's randint(j + 1) stream. A pure function of (key, n).
  m.def("rng_permutation", [](const std::vector<uint32_t>& key, uintptr_t out, uint64_t n) {
    const detcoll_rng_key_t k = toKey(key);
    auto* p = static_cast<int64_t*>(ptr(out));
    blocking([&] {
      for (uint64_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(i);
      for (uint64_t j = n; j-- > 1;) {
        int64_t r = 0;
        const detcoll_status_t s = detcoll_rng_randint(&k, j, &r, 1, DETCOLL_INT64, j + 1);
        if (s != DETCOLL_SUCCESS) return s;
        std::swap(p[j], p[r]);
      }
      return DETCOLL_SUCCESS;
    });
  });
  m.def("rng_counter_get", [](const std::string& name) {
    uint64_t v = 0;
    check(detcoll_rng_counter_get(name.c_str(), &v));
    return v;
  });
  m.def("rng_counter_set", [](const std::string& name, uint64_t v) {
    check(detcoll_rng_counter_set(name.c_str(), v));
  });
  m.def("rng_counter_next", [](const std::string& name) {
    uint64_t v = 0;
    check(detcoll_rng_counter_next(name.c_str(), &v));
    return v;
  });
  m.def("rng_state_save", [] {
    size_t needed = 0;
    detcoll_rng_state_save(nullptr, 0, &needed);
    std::string bytes(needed, '\0');
    check(detcoll_rng_state_save(bytes.data(), bytes.size(), &needed));
    return py::bytes(bytes.data(), needed);
  });
  m.def("rng_state_restore", [](const py::bytes& state) {
    const std::string bytes = state;
    blocking([&] { return detcoll_rng_state_restore(bytes.data(), bytes.size()); });
  });
}

}  // namespace detcoll_python
