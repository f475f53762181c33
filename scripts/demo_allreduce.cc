// detcoll_demo: why fusion breaks reproducibility, and how the ordered mode keeps it.
//
//   mpirun -np 3 detcoll_demo [--leaves-only] [workload.txt]   (default: ResNet-50's gradients)
//
// Part 1, layouts: every rank makes a gradient for each parameter of the model (random,
// non-integer, wide range, different per rank), then averages them across ranks twice: tensor by
// tensor, and fused into 64 MiB buffers in backward order, as Horovod's tensor fusion does. It
// does this in native mode (MPI_Allreduce) and in ordered mode, and prints a checksum of the
// averaged gradients for each. Ordered checksums agree across layouts, across runs and on every
// rank; native ones need not.
//
// Part 2, world sizes: a global step of 6 micro-batches, whose gradients depend on the
// micro-batch only, spread over the ranks (1 to 6 of them). Each rank passes its micro-batches'
// gradients as leaves (detcoll_allreduce_leaves, average). The invariant checksum is the same
// whatever the number of ranks; the ordered one depends on it.

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/hash.h"
#include "detcoll.h"
#include "tests/support/reference.h"
#include "tests/support/workload.h"

namespace {

constexpr size_t kFusionBytes = 64 << 20;

void check(detcoll_status_t status, const char* what) {
  if (status != DETCOLL_SUCCESS) {
    std::fprintf(stderr, "%s failed: %s\n", what, detcoll_last_error());
    std::exit(1);
  }
}

uint64_t checksum(const std::vector<std::vector<float>>& tensors) {
  detcoll::Fnv1a h;  // over the bytes, in registration order
  for (const auto& t : tensors) h.add(t.data(), t.size() * sizeof(float));
  return h.value();
}

void reducePerTensor(std::vector<std::vector<float>>& grads,
                     const std::vector<detcoll::testing::TensorShape>& shapes) {
  for (size_t t = 0; t < grads.size(); ++t) {
    check(detcoll_allreduce(grads[t].data(), grads[t].data(), grads[t].size(), DETCOLL_FLOAT32,
                            DETCOLL_AVERAGE, shapes[t].name.c_str()),
          "detcoll_allreduce");
  }
}

// Horovod-style fusion: gradients in backward (reverse) order, packed into buffers of up to
// kFusionBytes, each buffer reduced with one call, then unpacked.
void reduceFused(std::vector<std::vector<float>>& grads) {
  std::vector<float> buffer;
  std::vector<size_t> members;
  int fused = 0;
  auto flush = [&] {
    if (members.empty()) return;
    const std::string name = "fusion." + std::to_string(fused++);
    check(detcoll_allreduce(buffer.data(), buffer.data(), buffer.size(), DETCOLL_FLOAT32,
                            DETCOLL_AVERAGE, name.c_str()),
          "detcoll_allreduce");
    size_t offset = 0;
    for (size_t t : members) {
      std::memcpy(grads[t].data(), buffer.data() + offset, grads[t].size() * sizeof(float));
      offset += grads[t].size();
    }
    buffer.clear();
    members.clear();
  };
  for (size_t k = grads.size(); k-- > 0;) {
    if (!members.empty() && (buffer.size() + grads[k].size()) * sizeof(float) > kFusionBytes)
      flush();
    buffer.insert(buffer.end(), grads[k].begin(), grads[k].end());
    members.push_back(k);
  }
  flush();
}

}  // namespace

constexpr int kMicroBatches = 6;

// Part 2: prints the checksum of the averaged micro-batch gradients in ordered and invariant
// mode; returns false if ranks disagree.
bool reduceMicroBatches(const std::vector<detcoll::testing::TensorShape>& shapes, int rank,
                        int size) {
  // Micro-batch k lives on rank k % size; its gradient depends on (tensor, k) only.
  std::vector<int> mine;
  for (int k = rank; k < kMicroBatches; k += size) mine.push_back(k);
  bool ok = true;
  for (detcoll_mode_t mode : {DETCOLL_MODE_ORDERED, DETCOLL_MODE_INVARIANT}) {
    check(detcoll_set_mode(mode), "detcoll_set_mode");
    std::vector<std::vector<float>> averaged(shapes.size());
    double ms = 0;
    for (size_t t = 0; t < shapes.size(); ++t) {
      std::vector<std::vector<uint8_t>> leaves;
      std::vector<const void*> pointers;
      for (int k : mine) {
        leaves.push_back(detcoll::testing::randomBuffer(detcoll::DataType::kFloat32,
                                                        shapes[t].elements, 15485863u * t + k));
      }
      for (const auto& leaf : leaves) pointers.push_back(leaf.data());
      averaged[t].resize(shapes[t].elements);
      const auto start = std::chrono::steady_clock::now();
      check(detcoll_allreduce_leaves(pointers.data(), static_cast<int>(pointers.size()),
                                     averaged[t].data(), shapes[t].elements, DETCOLL_FLOAT32,
                                     DETCOLL_AVERAGE, shapes[t].name.c_str()),
            "detcoll_allreduce_leaves");
      ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
    }
    const uint64_t sum = checksum(averaged);
    std::vector<int64_t> all(size);
    const int64_t own = static_cast<int64_t>(sum);
    check(detcoll_allgather(&own, all.data(), 1, DETCOLL_INT64, "checksums"), "detcoll_allgather");
    bool ranksAgree = true;
    for (int64_t c : all) ranksAgree = ranksAgree && c == own;
    ok = ok && ranksAgree;
    if (rank == 0) {
      const char* name = mode == DETCOLL_MODE_ORDERED ? "ordered" : "invariant";
      std::printf("%s checksum over %d micro-batches on %d ranks: %016" PRIx64 "  %6.0f ms%s\n",
                  name, kMicroBatches, size, sum, ms, ranksAgree ? "" : "  ranks disagree!");
    }
  }
  check(detcoll_set_mode(DETCOLL_MODE_ORDERED), "detcoll_set_mode");
  return ok;
}

int main(int argc, char** argv) {
  check(detcoll_init(), "detcoll_init");
  const int rank = detcoll_rank();
  const int size = detcoll_size();
  bool leavesOnly = false;
  if (argc > 1 && std::string(argv[1]) == "--leaves-only") {
    leavesOnly = true;
    --argc;
    ++argv;
  }
  if (size > kMicroBatches) {
    if (rank == 0) std::fprintf(stderr, "run on at most %d ranks\n", kMicroBatches);
    detcoll_finalize();
    return 1;
  }
  const std::string path =
      argc > 1 ? argv[1] : detcoll::testing::workloadDirectory() + "/resnet50.txt";
  std::vector<detcoll::testing::TensorShape> shapes;
  std::string error;
  if (!detcoll::testing::loadWorkload(path, &shapes, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  if (leavesOnly) {
    const bool ok = reduceMicroBatches(shapes, rank, size);
    check(detcoll_finalize(), "detcoll_finalize");
    return ok ? 0 : 1;
  }
  std::vector<std::vector<float>> original(shapes.size());
  size_t elements = 0;
  for (size_t t = 0; t < shapes.size(); ++t) {
    const auto bytes = detcoll::testing::randomBuffer(
        detcoll::DataType::kFloat32, shapes[t].elements, 7919u * t + 104729u * rank);
    original[t].resize(shapes[t].elements);
    std::memcpy(original[t].data(), bytes.data(), bytes.size());
    elements += shapes[t].elements;
  }
  if (rank == 0) {
    std::printf(
        "detcoll demo: %s, %zu gradient tensors, %zu elements (%.1f MiB float32), %d ranks, "
        "average\n\n",
        path.substr(path.rfind('/') + 1).c_str(), shapes.size(), elements,
        elements * 4.0 / (1 << 20), size);
    std::printf("%-8s %-22s %-18s %9s  %s\n", "mode", "layout", "checksum", "time", "");
  }
  bool ok = true;
  for (detcoll_mode_t mode : {DETCOLL_MODE_NATIVE, DETCOLL_MODE_ORDERED}) {
    check(detcoll_set_mode(mode), "detcoll_set_mode");
    const char* modeName = mode == DETCOLL_MODE_NATIVE ? "native" : "ordered";
    uint64_t perTensor = 0;
    for (int layout = 0; layout < 2; ++layout) {
      auto grads = original;
      const auto start = std::chrono::steady_clock::now();
      if (layout == 0) {
        reducePerTensor(grads, shapes);
      } else {
        reduceFused(grads);
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      const uint64_t sum = checksum(grads);
      // Every rank must hold the same bits: gather the checksums.
      std::vector<int64_t> all(size);
      const int64_t mine = static_cast<int64_t>(sum);
      check(detcoll_allgather(&mine, all.data(), 1, DETCOLL_INT64, "checksums"),
            "detcoll_allgather");
      bool ranksAgree = true;
      for (int64_t c : all) ranksAgree = ranksAgree && c == mine;
      if (layout == 0) perTensor = sum;
      std::string note = ranksAgree ? "" : "ranks disagree! ";
      if (layout == 1) note += sum == perTensor ? "same as per-tensor" : "differs from per-tensor";
      if (mode == DETCOLL_MODE_ORDERED) ok = ok && ranksAgree && sum == perTensor;
      if (rank == 0) {
        std::printf("%-8s %-22s %016" PRIx64 "  %6.0f ms  %s\n", modeName,
                    layout == 0 ? "per-tensor" : "fused (64 MiB buffers)", sum, ms, note.c_str());
      }
    }
    if (rank == 0 && mode == DETCOLL_MODE_ORDERED) {
      std::printf("\nordered checksum: %016" PRIx64 "\n", perTensor);
    }
  }
  if (rank == 0) {
    std::printf("ordered mode: %s\n\n", ok ? "identical bits across layouts and ranks"
                                           : "DIFFERENT bits (a bug: please report)");
  }
  ok = reduceMicroBatches(shapes, rank, size) && ok;
  check(detcoll_finalize(), "detcoll_finalize");
  return ok ? 0 : 1;
}
