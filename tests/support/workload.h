#pragma once

// Gradient sets of real models (../shared/workloads/*.txt): one "name d0,d1,..." line per
// trainable parameter, '#' comments.

#include <cstddef>
#include <string>
#include <vector>

namespace detcoll::testing {

struct TensorShape {
  std::string name;
  std::vector<long> dims;
  size_t elements = 0;
};

// Reads a workload file; on failure returns false and says why in *error.
bool loadWorkload(const std::string& path, std::vector<TensorShape>* tensors, std::string* error);

// The folder holding the workload files: $DETCOLL_WORKLOADS if set, else ../shared/workloads
// beside the source tree if it exists, else the copy in tests/data/workloads.
std::string workloadDirectory();

}  // namespace detcoll::testing
