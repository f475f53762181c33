#include "tests/support/workload.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace detcoll::testing {

bool loadWorkload(const std::string& path, std::vector<TensorShape>* tensors, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot open workload file " + path;
    return false;
  }
  tensors->clear();
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    TensorShape t;
    std::string dims;
    if (!(fields >> t.name >> dims)) {
      *error = path + ":" + std::to_string(number) + ": expected 'name dims'";
      return false;
    }
    t.elements = 1;
    std::istringstream parts(dims);
    std::string part;
    while (std::getline(parts, part, ',')) {
      char* end = nullptr;
      const long d = std::strtol(part.c_str(), &end, 10);
      if (part.empty() || *end != '\0' || d <= 0) {
        *error = path + ":" + std::to_string(number) + ": bad dimension '" + part + "'";
        return false;
      }
      t.dims.push_back(d);
      t.elements *= static_cast<size_t>(d);
    }
    tensors->push_back(std::move(t));
  }
  return true;
}

std::string workloadDirectory() {
  if (const char* dir = std::getenv("DETCOLL_WORKLOADS")) return dir;
  // The project's shared folder beside the checkout when there is one, else the copy in the
  // repository (a clean clone on its own).
  const std::string shared = std::string(DETCOLL_SOURCE_DIR) + "/../shared/workloads";
  if (std::ifstream(shared + "/resnet50.txt").good()) return shared;
  return std::string(DETCOLL_SOURCE_DIR) + "/tests/data/workloads";
}

}  // namespace detcoll::testing
