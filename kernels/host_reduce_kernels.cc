#include "kernels/host_reduce_kernels.h"

#include <memory>

#include "kernels/fixed_point.h"
#include "kernels/fold.h"

namespace detcoll::kernels {
namespace {

// This thread's scratch buffers and how many of them the live HostReduceKernels objects use.
struct Arena {
  std::vector<std::unique_ptr<char[]>> buffers;
  std::vector<size_t> sizes;
  size_t used = 0;
};

Arena& arena() {
  thread_local Arena a;
  return a;
}

}  // namespace

HostReduceKernels::HostReduceKernels() : first_(arena().used) {}

HostReduceKernels::~HostReduceKernels() {
  arena().used = first_;
}

size_t HostReduceKernels::mark() const {
  return arena().used;
}

void HostReduceKernels::release(size_t mark) {
  Arena& a = arena();
  if (mark >= first_ && mark < a.used) a.used = mark;
}

void* HostReduceKernels::scratch(size_t bytes) {
  Arena& a = arena();
  if (a.used == a.buffers.size()) {
    a.buffers.emplace_back();
    a.sizes.push_back(0);
  }
  const size_t k = a.used++;
  if (a.sizes[k] < bytes) {
    a.buffers[k] = std::make_unique<char[]>(bytes);
    a.sizes[k] = bytes;
  }
  return a.buffers[k].get();
}

Pieces HostReduceKernels::table(const void* const* pointers, int) {
  Pieces p;
  p.table = reinterpret_cast<const char* const*>(pointers);
  return p;
}

const void* const* HostReduceKernels::pointers(const Pieces& pieces, int k) {
  const void** out = small_;
  if (k > kSmall) {
    pointers_.resize(k);
    out = pointers_.data();
  }
  for (int j = 0; j < k; ++j) out[j] = pieces.at<char>(j);
  return out;
}

void HostReduceKernels::fold(void* out, const Pieces& pieces, int k, int64_t n, DataType type,
                             ReduceOp op, int64_t divisor, bool) {
  foldRankOrder(out, pointers(pieces, k), k, static_cast<size_t>(n), type, op, divisor);
}

void HostReduceKernels::localKeys(void* keys, const Pieces& leaves, int nleaves, int64_t n,
                                  DataType type, bool) {
  localMaxKeys(keys, pointers(leaves, nleaves), nleaves, 0, static_cast<size_t>(n), type);
}

void HostReduceKernels::foldKeys(void* out, const Pieces& pieces, int p, int64_t n, DataType type) {
  foldMaxKeys(out, pointers(pieces, p), p, static_cast<size_t>(n), type);
}

void HostReduceKernels::encode(int64_t* out, const Pieces& leaves, int nleaves, const void* keys,
                               int64_t n, DataType type, bool) {
  encodeLeaves(out, pointers(leaves, nleaves), nleaves, keys, 0, static_cast<size_t>(n), type);
}

void HostReduceKernels::decode(void* out, const Pieces& sums, int p, const void* keys, int64_t n,
                               DataType type, ReduceOp op, int64_t leaves, bool) {
  decodeSums(out, reinterpret_cast<const int64_t* const*>(pointers(sums, p)), p, keys,
             static_cast<size_t>(n), type, op, leaves);
}

void HostReduceKernels::invariantLocal(void* out, const Pieces& pieces, int p, int64_t n,
                                       DataType type, ReduceOp op, bool) {
  invariantReduceLocal(out, pointers(pieces, p), p, static_cast<size_t>(n), type, op);
}

}  // namespace detcoll::kernels
