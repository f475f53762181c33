#include "tests/mpi/mpi_test_util.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "common/hash.h"

namespace detcoll::testing {

int worldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int worldSize() {
  int p = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

uint64_t hashText(const std::string& text) {
  return hashName(text);
}

uint64_t seedFor(const std::string& label, int rank) {
  // The label's hash, moved by the rank, through a splitmix64 finish.
  uint64_t z = hashText(label) + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(rank + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool expectOnAllRanks(bool ok, const std::string& detail) {
  const int p = worldSize();
  std::vector<int> flags(p);
  int mine = ok ? 1 : 0;
  MPI_Allgather(&mine, 1, MPI_INT, flags.data(), 1, MPI_INT, MPI_COMM_WORLD);
  if (!ok) std::fprintf(stderr, "[rank %d] %s\n", worldRank(), detail.c_str());
  std::string failing;
  for (int j = 0; j < p; ++j) {
    if (!flags[j]) failing += " " + std::to_string(j);
  }
  if (!failing.empty()) {
    ADD_FAILURE() << "failed on rank(s)" << failing << (ok ? "" : "; here: " + detail);
  }
  return failing.empty();
}

}  // namespace detcoll::testing
