// detcoll._detcoll: the C API (bindings/c/detcoll.h) for Python. Buffers travel as addresses
// (a torch tensor's data_ptr()), so the module needs no framework headers; the Python package
// (detcoll/, detcoll.torch) checks tensors and keeps them alive. Blocking calls release the GIL.
// A failed call raises detcoll.Error (a subclass per status) with the library's message.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <algorithm>
#include <optional>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "binding.h"
#include "detcoll.h"

namespace py = pybind11;

namespace detcoll_python {

// dict: status code -> exception class, set by the package. Never released: a py::object here
// would be destroyed at exit, after the interpreter.
PyObject* g_errors = nullptr;

void setErrors(py::dict errors) {
  Py_XDECREF(g_errors);
  g_errors = errors.inc_ref().ptr();
}

[[noreturn]] void raise(detcoll_status_t status) {
  const std::string message = detcoll_last_error();
  py::gil_scoped_acquire gil;
  PyObject* type = g_errors != nullptr
                       ? PyDict_GetItem(g_errors, py::int_(static_cast<int>(status)).ptr())
                       : nullptr;
  PyErr_SetString(type != nullptr ? type : PyExc_RuntimeError, message.c_str());
  throw py::error_already_set();
}

}  // namespace detcoll_python

namespace {

using namespace detcoll_python;

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
  // The completed orphans leave the list before the GIL is released: another thread may reap,
  // or drop a request, while this one waits.
  std::vector<Orphan> finished;
  {
    std::vector<Orphan>& orphans = *g_orphans;
    size_t kept = 0;
    for (Orphan& o : orphans) {
      int done = 0;
      detcoll_poll(o.handle, &done);
      if (done == 0 && !all) {
        orphans[kept++] = o;
      } else {
        finished.push_back(o);
      }
    }
    orphans.resize(kept);
  }
  if (finished.empty()) return;
  // The host waits for a dropped device request's work before its tensors go: no stream of this
  // thread is known to order their reuse after it. (Every device call sets its own stream.)
  detcoll_set_cuda_stream(nullptr);
  {
    py::gil_scoped_release release;
    for (const Orphan& o : finished) detcoll_wait(o.handle);  // its status is nobody's
  }
  for (const Orphan& o : finished) Py_XDECREF(o.keep);
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

  m.def("_set_errors", &setErrors);
  m.def("reject_next_call",
        [](const std::string& reason) { check(detcoll_reject_next_call(reason.c_str())); });
  m.def("init", [] { blocking([] { return detcoll_init(); }); });
  m.def("finalize", [] {
    blocking([] { return detcoll_finalize(); });
    reap(true);
  });
  m.def("cuda_built", [] { return detcoll_built_with_cuda() != 0; });
  m.def("nccl_version", [] { return detcoll_nccl_version(); });
  // The calling thread's CUDA stream (a cudaStream_t as an int; 0: none), for its later device
  // calls, requests and waits.
  m.def("set_cuda_stream", [](uintptr_t stream) { check(detcoll_set_cuda_stream(ptr(stream))); });
  m.def("rank", [] { return detcoll_rank(); });
  m.def("size", [] { return detcoll_size(); });
  m.def("local_rank", [] { return detcoll_local_rank(); });
  m.def("local_size", [] { return detcoll_local_size(); });
  m.def("set_mode", [](int mode) { check(detcoll_set_mode(static_cast<detcoll_mode_t>(mode))); });
  m.def("get_mode", [] { return static_cast<int>(detcoll_get_mode()); });
  m.def("hash", [](uintptr_t data, size_t bytes) {
    uint64_t value = 0;
    detcoll_status_t status;
    {
      // Memory speed, so large tensors take milliseconds: other threads run meanwhile. A small
      // one's hash takes less than handing the GIL over and back.
      std::optional<py::gil_scoped_release> release;
      if (bytes >= (256 << 10)) release.emplace();
      status = detcoll_hash(reinterpret_cast<const void*>(data), bytes, &value);
    }
    check(status);
    return value;
  });

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

  defineOps(m);
  defineFamilies(m);
  defineDebug(m);
  defineRandom(m);
}
