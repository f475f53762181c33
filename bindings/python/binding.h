#pragma once

// What the source files of the detcoll._detcoll extension share: the mapping of a failed C call to
// the package's exception, the GIL-free wrapper of blocking calls, and the definitions each file
// adds to the module (module.cc: setup, collectives and requests; module_ops.cc: the
// deterministic ops and the random streams; module_debug.cc: the training trace's values file).

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "detcoll.h"

namespace detcoll_python {

namespace py = pybind11;

// Sets the dict status code -> exception class (the package's).
void setErrors(py::dict errors);
// Raises the exception of `status` with the library's message (detcoll_last_error).
[[noreturn]] void raise(detcoll_status_t status);
inline void check(detcoll_status_t status) {
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

inline void* ptr(uintptr_t address) {
  return reinterpret_cast<void*>(address);
}

void defineOps(py::module_& m);
void defineFamilies(py::module_& m);
void defineRandom(py::module_& m);
void defineDebug(py::module_& m);

// The training trace's log of detcoll.rng key derivations (module_debug.cc), appended to by the
// rng_derive calls while a recorder has it on. Under the GIL.
void logDerivation(const detcoll_rng_key_t& parent, const std::string& domain,
                   const std::vector<uint64_t>& path, const detcoll_rng_key_t& child);

}  // namespace detcoll_python
