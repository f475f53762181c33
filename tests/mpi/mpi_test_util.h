#pragma once

// Helpers shared by the mpirun tests: world queries through raw MPI (the code under test is the
// C API), per-case seeds, and a verdict shared by all ranks.

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "detcoll.h"

namespace detcoll::testing {

using Bytes = std::vector<uint8_t>;

int worldRank();
int worldSize();

// FNV-1a, 64 bits.
uint64_t hashText(const std::string& text);

// A seed that differs per case (label) and per rank.
uint64_t seedFor(const std::string& label, int rank);

// Shares one verdict: every rank learns which ranks failed. A failing rank prints its detail.
// Returns true when every rank passed, the same value everywhere (safe to branch on).
bool expectOnAllRanks(bool ok, const std::string& detail);

// The C API's names for a dtype and an op, and their text for messages.
inline detcoll_dtype_t cType(DataType t) {
  return static_cast<detcoll_dtype_t>(t);
}
inline detcoll_op_t cOp(ReduceOp op) {
  return static_cast<detcoll_op_t>(op);
}
inline std::string typeName(DataType t) {
  return dataTypeName(t);
}
inline std::string opName(ReduceOp op) {
  return reduceOpName(op);
}

}  // namespace detcoll::testing
