// Per-sample random streams under mpirun: what a sample draws must not depend on how many ranks
// there are or which rank processes it.
//   detcoll_rng_streams --write FILE     (rank 0 writes the table of every sample's draws)
//   detcoll_rng_streams --compare FILE   (rank 0 compares the table with FILE, bit for bit)
// For each of 3 steps, a data order is shuffled from the step's key (Fisher-Yates with randint,
// the same on every rank), and 64 samples are spread over the ranks in three ways: in blocks,
// round-robin, and in the shuffled order. Each rank derives sample j's key from the agreed root
// key, (step, j) and nothing else, and draws an augmentation (uniform), a noise tensor (normal),
// two dropout masks (bernoulli, one key per layer) and crop offsets (randint). The rows of all
// ranks are combined; the three spreads must give the same table, and the table must equal the
// one written at another world size. Exits 0 on every rank when all holds, 1 otherwise.

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "detcoll.h"

namespace {

constexpr int kSteps = 3;
constexpr int kSamples = 64;
// Counts that end inside Philox blocks; 8-byte values first, so every field is aligned.
constexpr size_t kUniform = 258, kNormal = 129, kMask = 96, kCrops = 5;
constexpr size_t kRowBytes = kNormal * 8 + kCrops * 8 + kUniform * 4 + 2 * kMask * 4;
static_assert(kRowBytes % 8 == 0, "rows must keep 8-byte values aligned");

bool check(detcoll_status_t status, const char* what) {
  if (status == DETCOLL_SUCCESS) return true;
  std::fprintf(stderr, "[rank %d] %s failed: %s\n", detcoll_rank(), what, detcoll_last_error());
  return false;
}

detcoll_rng_key_t derive(const detcoll_rng_key_t& parent, const char* domain,
                         std::vector<uint64_t> path) {
  detcoll_rng_key_t child;
  detcoll_rng_derive(&parent, domain, path.data(), path.size(), &child);
  return child;
}

// Sample j's draws at one step, as one row of bytes.
bool drawSample(const detcoll_rng_key_t& root, uint64_t step, uint64_t sample, uint8_t* row) {
  const detcoll_rng_key_t key = derive(root, "sample", {step, sample});
  const detcoll_rng_key_t augment = derive(key, "augment", {});
  const detcoll_rng_key_t noise = derive(key, "noise", {});
  const detcoll_rng_key_t crop = derive(key, "crop", {});
  bool ok =
      check(detcoll_rng_normal(&noise, 0, row, kNormal, DETCOLL_FLOAT64, 0.25, 3.0), "normal");
  row += kNormal * 8;
  ok &= check(detcoll_rng_randint(&crop, 0, row, kCrops, DETCOLL_INT64, 224 - 192 + 1), "randint");
  row += kCrops * 8;
  ok &= check(detcoll_rng_uniform(&augment, 0, row, kUniform, DETCOLL_FLOAT32), "uniform");
  row += kUniform * 4;
  for (uint64_t layer = 0; layer < 2; ++layer) {
    const detcoll_rng_key_t mask = derive(key, "dropout", {layer});
    ok &= check(detcoll_rng_bernoulli(&mask, 0, row, kMask, DETCOLL_FLOAT32, 0.1), "bernoulli");
    row += kMask * 4;
  }
  return ok;
}

// The step's data order: Fisher-Yates with the swaps drawn from the step's key.
std::vector<int> shuffled(const detcoll_rng_key_t& root, uint64_t step) {
  const detcoll_rng_key_t key = derive(root, "data-order", {step});
  std::vector<int> order(kSamples);
  for (int j = 0; j < kSamples; ++j) order[j] = j;
  for (int j = kSamples - 1; j > 0; --j) {
    int64_t pick = 0;
    detcoll_rng_randint(&key, static_cast<uint64_t>(j), &pick, 1, DETCOLL_INT64, j + 1);
    std::swap(order[j], order[pick]);
  }
  return order;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "--write") != 0 && std::strcmp(argv[1], "--compare"))) {
    std::fprintf(stderr, "usage: %s --write|--compare FILE\n", argv[0]);
    return 2;
  }
  if (!check(detcoll_init(), "detcoll_init")) return 1;
  const int rank = detcoll_rank(), size = detcoll_size();
  detcoll_rng_key_t root;
  bool ok = check(detcoll_rng_root_key(&root), "detcoll_rng_root_key");

  const size_t tableBytes = static_cast<size_t>(kSteps) * kSamples * kRowBytes;
  std::vector<uint8_t> tables[3];
  const char* spreads[3] = {"blocks", "round-robin", "shuffled order"};
  for (int spread = 0; spread < 3; ++spread) {
    std::vector<uint8_t> mine(tableBytes, 0);
    for (uint64_t step = 0; step < kSteps; ++step) {
      const std::vector<int> order = shuffled(root, step);
      for (int position = 0; position < kSamples; ++position) {
        int owner = 0, sample = position;
        if (spread == 0) owner = position * size / kSamples;
        if (spread == 1) owner = position % size;
        if (spread == 2) sample = order[position], owner = position % size;
        if (owner != rank) continue;
        ok &= drawSample(root, step, static_cast<uint64_t>(sample),
                         mine.data() + (step * kSamples + sample) * kRowBytes);
      }
    }
    // Each row is written by exactly one rank; the others leave zeros, so OR combines them.
    tables[spread].resize(tableBytes);
    MPI_Allreduce(mine.data(), tables[spread].data(), static_cast<int>(tableBytes), MPI_BYTE,
                  MPI_BOR, MPI_COMM_WORLD);
  }
  for (int spread = 1; spread < 3; ++spread) {
    if (tables[spread] != tables[0]) {
      std::fprintf(stderr, "[rank %d] samples spread in %s draw other bits than in %s\n", rank,
                   spreads[spread], spreads[0]);
      ok = false;
    }
  }
  // Per-rank streams, when asked for, differ between ranks.
  const detcoll_rng_key_t own = derive(root, "per-rank", {static_cast<uint64_t>(rank)});
  std::vector<detcoll_rng_key_t> all(size);
  MPI_Allgather(&own, sizeof own, MPI_BYTE, all.data(), sizeof own, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 0; r < size; ++r) {
    if (r != rank && std::memcmp(&all[r], &own, sizeof own) == 0) {
      std::fprintf(stderr, "[rank %d] per-rank key equals rank %d's\n", rank, r);
      ok = false;
    }
  }

  if (rank == 0 && ok) {
    const std::string path = argv[2];
    if (std::strcmp(argv[1], "--write") == 0) {
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(tables[0].data()), tableBytes);
      ok = static_cast<bool>(out);
      if (!ok) std::fprintf(stderr, "cannot write %s\n", path.c_str());
    } else {
      std::ifstream in(path, std::ios::binary);
      std::vector<uint8_t> reference((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
      if (reference.size() != tableBytes) {
        std::fprintf(stderr, "%s holds %zu bytes, expected %zu\n", path.c_str(), reference.size(),
                     tableBytes);
        ok = false;
      }
      for (size_t row = 0; ok && row < static_cast<size_t>(kSteps) * kSamples; ++row) {
        if (std::memcmp(reference.data() + row * kRowBytes, tables[0].data() + row * kRowBytes,
                        kRowBytes) != 0) {
          std::fprintf(stderr, "step %zu sample %zu draws other bits on %d ranks than in %s\n",
                       row / kSamples, row % kSamples, size, path.c_str());
          ok = false;
        }
      }
    }
  }
  int mine = ok ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&mine, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) {
    uint64_t seed = 0;
    detcoll_rng_get_seed(&seed);
    std::printf("per-sample streams, %d steps x %d samples on %d ranks, seed %llu: %s\n", kSteps,
                kSamples, size, static_cast<unsigned long long>(seed),
                all_ok ? "identical for every spread" : "FAILED");
  }
  detcoll_finalize();
  return all_ok ? 0 : 1;
}
