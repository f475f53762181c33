#pragma once

// Helpers shared by the mpirun tests: world queries through raw MPI (the code under test is the
// C API), per-case seeds, and a verdict shared by all ranks.

#include <cstdint>
#include <string>
#include <vector>

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

}  // namespace detcoll::testing
