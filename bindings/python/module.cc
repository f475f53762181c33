// detcoll._detcoll: the C API (bindings/c/detcoll.h) for Python. Buffers travel as addresses
// (a torch tensor's data_ptr()), so the module needs no framework headers; the Python package
// (detcoll/, detcoll.torch) checks tensors and keeps them alive. Blocking calls release the GIL.
// A failed call raises detcoll.Error (a subclass per status) with the library's message.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <algorithm>
#include <array>
#include <optional>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "detcoll.h"

namespace py = pybind11;

namespace {

// dict: status code -> exception class, set by the package. Never released: a py::object here
// would be destroyed at exit, after the interpreter.
PyObject* g_errors = nullptr;

[[noreturn]] void raise(detcoll_status_t status) {
  const std::string message = detcoll_last_error();
  py::gil_scoped_acquire gil;
  PyObject* type = g_errors != nullptr
                       ? PyDict_GetItem(g_errors, py::int_(static_cast<int>(status)).ptr())
                       : nullptr;
  if (type != nullptr) {
    PyErr_SetString(type, message.c_str());
  } else {
    PyErr_SetString(PyExc_RuntimeError, message.c_str());
  }
  throw py::error_already_set();
}

void check(detcoll_status_t status) {
  if (status != DETCOLL_SUCCESS) raise(status);
}

// A blocking call, without the GIL.
template <typename F>
void blocking(F call) {
  detcoll_status_t status;
  {
    py::gil_scoped_release release;
    status = call();
  }
  check(status);
}

void* ptr(uintptr_t address) {
  return reinterpret_cast<void*>(address);
}

// Requests dropped before they completed, with the objects that own their buffers: as in
// Horovod, dropping a handle neither waits (the request may wait for other ranks) nor cancels it
// (the other ranks' requests of that name need this one). Each is released once it has completed:
// reap() runs at every enqueue and after finalize. Guarded by the GIL; raw references, never
// destroyed at exit (after the interpreter).
struct Orphan {
  detcoll_handle_t handle;
  PyObject* keep;
};
std::vector<Orphan>* g_orphans = new std::vector<Orphan>();

// Releases the dropped requests that have completed (all of them with `all`, waiting for each:
// after finalize, every request has completed or failed). Called with the GIL held.
void reap(bool all) {
  std::vector<Orphan>& orphans = *g_orphans;
  size_t kept = 0;
  for (Orphan& o : orphans) {
    int done = 0;
    detcoll_poll(o.handle, &done);
    if (done == 0 && !all) {
      orphans[kept++] = o;
      continue;
    }
    {
      py::gil_scoped_release release;
      detcoll_wait(o.handle);  // its status is nobody's: the handle was dropped
    }
    Py_XDECREF(o.keep);
  }
  orphans.resize(kept);
}

// An asynchronous request. wait() completes and releases it; a request dropped without a wait
// becomes an orphan (above). keep() hands it the objects that own its buffers (the tensors): they
// are released only once the request has completed, whatever order Python frees things in.
class Request {
 public:
  explicit Request(detcoll_handle_t handle) : handle_(handle) {}
  Request(const Request&) = delete;
  ~Request() {
    if (handle_ != nullptr) g_orphans->push_back({handle_, keep_.release().ptr()});
  }
  void keep(py::object owners) { keep_ = std::move(owners); }
  bool poll() {
    if (handle_ == nullptr) return true;
    int done = 0;
    check(detcoll_poll(handle_, &done));
    return done != 0;
  }
  void wait() {
    if (handle_ == nullptr) throw py::value_error("this request was already waited for");
    detcoll_handle_t handle = handle_;
    handle_ = nullptr;
    blocking([&] { return detcoll_wait(handle); });
    keep_ = py::none();
  }

 private:
  detcoll_handle_t handle_;
  py::object keep_ = py::none();
};

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

PYBIND11_MODULE(_detcoll, m) {
  m.doc() = "detcoll's C API; use the detcoll and detcoll.torch packages";

  // The C API's enumerators (detcoll.h) as ints, each named as in C without DETCOLL_: the package
  // takes the codes it passes and compares from here rather than retyping their values.
#define DETCOLL_EXPORT_ENUMERATOR(name) m.attr(#name) = static_cast<int>(DETCOLL_##name)
  DETCOLL_EXPORT_ENUMERATOR(SUCCESS);  // detcoll_status_t
  DETCOLL_EXPORT_ENUMERATOR(ERR_INVALID_ARGUMENT);
  DETCOLL_EXPORT_ENUMERATOR(ERR_MISMATCH);
  DETCOLL_EXPORT_ENUMERATOR(ERR_TIMEOUT);
  DETCOLL_EXPORT_ENUMERATOR(ERR_BACKEND);
  DETCOLL_EXPORT_ENUMERATOR(ERR_NOT_INITIALIZED);
  DETCOLL_EXPORT_ENUMERATOR(ERR_INTERNAL);
  DETCOLL_EXPORT_ENUMERATOR(FLOAT32);  // detcoll_dtype_t
  DETCOLL_EXPORT_ENUMERATOR(FLOAT64);
  DETCOLL_EXPORT_ENUMERATOR(FLOAT16);
  DETCOLL_EXPORT_ENUMERATOR(BFLOAT16);
  DETCOLL_EXPORT_ENUMERATOR(INT32);
  DETCOLL_EXPORT_ENUMERATOR(INT64);
  DETCOLL_EXPORT_ENUMERATOR(SUM);  // detcoll_op_t
  DETCOLL_EXPORT_ENUMERATOR(AVERAGE);
  DETCOLL_EXPORT_ENUMERATOR(MIN);
  DETCOLL_EXPORT_ENUMERATOR(MAX);
  DETCOLL_EXPORT_ENUMERATOR(MODE_NATIVE);  // detcoll_mode_t
  DETCOLL_EXPORT_ENUMERATOR(MODE_ORDERED);
  DETCOLL_EXPORT_ENUMERATOR(MODE_INVARIANT);
  DETCOLL_EXPORT_ENUMERATOR(REQUEST_ALLREDUCE);  // detcoll_request_kind_t
  DETCOLL_EXPORT_ENUMERATOR(REQUEST_BROADCAST);
  DETCOLL_EXPORT_ENUMERATOR(REQUEST_ALLGATHER);
  DETCOLL_EXPORT_ENUMERATOR(REQUEST_REDUCESCATTER);
  DETCOLL_EXPORT_ENUMERATOR(REQUEST_ALLTOALL);
#undef DETCOLL_EXPORT_ENUMERATOR

  m.def("_set_errors", [](py::dict errors) {
    Py_XDECREF(g_errors);
    g_errors = errors.inc_ref().ptr();
  });

  m.def("reject_next_call",
        [](const std::string& reason) { check(detcoll_reject_next_call(reason.c_str())); });
  m.def("init", [] { blocking([] { return detcoll_init(); }); });
  m.def("finalize", [] {
    blocking([] { return detcoll_finalize(); });
    reap(true);
  });
  m.def("rank", [] { return detcoll_rank(); });
  m.def("size", [] { return detcoll_size(); });
  m.def("local_rank", [] { return detcoll_local_rank(); });
  m.def("local_size", [] { return detcoll_local_size(); });
  m.def("set_mode", [](int mode) { check(detcoll_set_mode(static_cast<detcoll_mode_t>(mode))); });
  m.def("get_mode", [] { return static_cast<int>(detcoll_get_mode()); });

  m.def("allreduce", [](uintptr_t send, uintptr_t recv, size_t count, int dtype, int op,
                        const std::string& name) {
    blocking([&] {
      return detcoll_allreduce(ptr(send), ptr(recv), count, static_cast<detcoll_dtype_t>(dtype),
                               static_cast<detcoll_op_t>(op), name.c_str());
    });
  });
  m.def("allreduce_leaves", [](const std::vector<uintptr_t>& leaves, uintptr_t recv, size_t count,
                               int dtype, int op, const std::string& name) {
    std::vector<const void*> pointers;
    for (uintptr_t leaf : leaves) pointers.push_back(ptr(leaf));
    blocking([&] {
      return detcoll_allreduce_leaves(pointers.data(), static_cast<int>(pointers.size()), ptr(recv),
                                      count, static_cast<detcoll_dtype_t>(dtype),
                                      static_cast<detcoll_op_t>(op), name.c_str());
    });
  });
  m.def("broadcast", [](uintptr_t buf, size_t count, int dtype, int root, const std::string& name) {
    blocking([&] {
      return detcoll_broadcast(ptr(buf), count, static_cast<detcoll_dtype_t>(dtype), root,
                               name.c_str());
    });
  });
  m.def("allgather",
        [](uintptr_t send, uintptr_t recv, size_t count, int dtype, const std::string& name) {
          blocking([&] {
            return detcoll_allgather(ptr(send), ptr(recv), count,
                                     static_cast<detcoll_dtype_t>(dtype), name.c_str());
          });
        });

  py::class_<Request>(m, "Request")
      .def("poll", &Request::poll)
      .def("wait", &Request::wait)
      .def("keep", &Request::keep);
  auto enqueued = [](detcoll_status_t status, detcoll_handle_t handle) {
    reap(false);
    check(status);
    return std::make_unique<Request>(handle);
  };
  m.def("allreduce_async", [=](uintptr_t send, uintptr_t recv, size_t count, int dtype, int op,
                               const std::string& name) {
    detcoll_handle_t h = nullptr;
    const detcoll_status_t s =
        detcoll_allreduce_async(ptr(send), ptr(recv), count, static_cast<detcoll_dtype_t>(dtype),
                                static_cast<detcoll_op_t>(op), name.c_str(), &h);
    return enqueued(s, h);
  });
  m.def("grouped_allreduce_async", [](const std::vector<uintptr_t>& sends,
                                      const std::vector<uintptr_t>& recvs,
                                      const std::vector<size_t>& counts, int dtype, int op,
                                      const std::vector<std::string>& names) {
    const size_t n = sends.size();
    if (recvs.size() != n || counts.size() != n || names.size() != n) {
      throw py::value_error("grouped_allreduce_async: lists of different lengths");
    }
    std::vector<const void*> s;
    std::vector<void*> r;
    std::vector<const char*> nm;
    for (size_t i = 0; i < n; ++i) {
      s.push_back(ptr(sends[i]));
      r.push_back(ptr(recvs[i]));
      nm.push_back(names[i].c_str());
    }
    std::vector<detcoll_handle_t> handles(n, nullptr);
    check(detcoll_grouped_allreduce_async(
        static_cast<int>(n), s.data(), r.data(), counts.data(), static_cast<detcoll_dtype_t>(dtype),
        static_cast<detcoll_op_t>(op), nm.data(), handles.data()));
    std::vector<std::unique_ptr<Request>> requests;
    for (detcoll_handle_t h : handles) requests.push_back(std::make_unique<Request>(h));
    return requests;
  });
  m.def(
      "enqueue",
      [=](int kind, uintptr_t send, uintptr_t recv, size_t count, int dtype, int op, int root,
          const std::string& name, std::optional<std::vector<int64_t>> shape,
          std::optional<std::vector<size_t>> counts, std::optional<std::vector<size_t>> recvcounts,
          int processSet) {
        detcoll_request_desc_t r{};
        r.process_set = processSet;
        r.kind = static_cast<detcoll_request_kind_t>(kind);
        r.sendbuf = ptr(send);
        r.recvbuf = ptr(recv);
        r.count = count;
        r.dtype = static_cast<detcoll_dtype_t>(dtype);
        r.op = static_cast<detcoll_op_t>(op);
        r.root = root;
        r.name = name.c_str();
        if (shape) {
          r.shape = shape->data();
          r.ndim = static_cast<int>(shape->size());
        }
        // Lists of another length than the world's size are the library's to report; a short
        // one is padded so that it never reads past the end.
        const size_t p = static_cast<size_t>(std::max(detcoll_process_set_size(processSet), 0));
        std::vector<size_t> c, rc;
        if (counts) {
          c = *counts;
          if (c.size() != p) {
            throw py::value_error("enqueue: " + std::to_string(c.size()) + " counts for " +
                                  std::to_string(p) + " ranks");
          }
          r.counts = c.data();
        }
        if (recvcounts) {
          rc = *recvcounts;
          if (rc.size() != p) {
            throw py::value_error("enqueue: " + std::to_string(rc.size()) + " receive counts for " +
                                  std::to_string(p) + " ranks");
          }
          r.recvcounts = rc.data();
        }
        detcoll_handle_t h = nullptr;
        const detcoll_status_t s = detcoll_enqueue(&r, &h);
        return enqueued(s, h);
      },
      py::arg("kind"), py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"),
      py::arg("op") = static_cast<int>(DETCOLL_SUM), py::arg("root") = 0, py::arg("name") = "",
      py::arg("shape") = py::none(), py::arg("counts") = py::none(),
      py::arg("recvcounts") = py::none(), py::arg("process_set") = 0);
  m.def("process_set_add", [](const std::vector<int>& ranks) {
    int id = 0;
    blocking(
        [&] { return detcoll_process_set_add(ranks.data(), static_cast<int>(ranks.size()), &id); });
    return id;
  });
  m.def("process_set_remove",
        [](int id) { blocking([&] { return detcoll_process_set_remove(id); }); });
  m.def("process_set_rank", [](int id) { return detcoll_process_set_rank(id); });
  m.def("process_set_size", [](int id) { return detcoll_process_set_size(id); });
  m.def("join", [] {
    int last = -1;
    blocking([&] { return detcoll_join(&last); });
    return last;
  });
  m.def("broadcast_async",
        [=](uintptr_t buf, size_t count, int dtype, int root, const std::string& name) {
          detcoll_handle_t h = nullptr;
          const detcoll_status_t s = detcoll_broadcast_async(
              ptr(buf), count, static_cast<detcoll_dtype_t>(dtype), root, name.c_str(), &h);
          return enqueued(s, h);
        });
  m.def("allgather_async",
        [=](uintptr_t send, uintptr_t recv, size_t count, int dtype, const std::string& name) {
          detcoll_handle_t h = nullptr;
          const detcoll_status_t s = detcoll_allgather_async(
              ptr(send), ptr(recv), count, static_cast<detcoll_dtype_t>(dtype), name.c_str(), &h);
          return enqueued(s, h);
        });

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
    return fromKey(child);
  });
  m.def("rng_begin_step", [](uint64_t step) { check(detcoll_rng_begin_step(step)); });
  m.def("rng_derive_checked", [](const std::vector<uint32_t>& parent, const std::string& domain,
                                 const std::vector<uint64_t>& path, const std::string& purpose) {
    const detcoll_rng_key_t p = toKey(parent);
    detcoll_rng_key_t child;
    check(detcoll_rng_derive_checked(&p, domain.c_str(), path.data(), path.size(), purpose.c_str(),
                                     &child));
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
