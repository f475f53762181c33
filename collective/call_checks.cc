#include "collective/call_checks.h"

#include <cstdint>
#include <string>

namespace detcoll::collective {
namespace {

// Whether [a, a + aBytes) and [b, b + bBytes) overlap without starting at the same address (the
// same buffer is "in place", which every call allows).
bool overlapsPartially(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  if (a == b || aBytes == 0 || bBytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + bBytes && y < x + aBytes;
}

bool overlapsAtAll(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  if (aBytes == 0 || bBytes == 0) return false;
  return a == b || overlapsPartially(a, aBytes, b, bBytes);
}

// The first failure wins. Messages are built only on failure: these checks run on every call,
// small ones included.
class Checks {
 public:
  template <typename Message>
  void require(bool condition, Message message) {
    if (status_.isOk() && !condition) status_ = Status::invalidArgument(message());
  }
  bool ok() const { return status_.isOk(); }
  Status status() const { return status_; }

 private:
  Status status_;
};

std::string whileCount(size_t count) {
  return " is null while count is " + std::to_string(count);
}

// The sum of a call's per-rank counts, or false when there is not one per rank or the sum's bytes
// overflow.
bool sumCounts(Checks& checks, const char* what, const uint64_t* counts, size_t n, size_t ranks,
               size_t elementBytes, uint64_t* sum) {
  checks.require(counts != nullptr && n == ranks, [&] {
    return std::string(what) + " has " + (counts == nullptr ? "no" : std::to_string(n)) +
           " entries; it needs one for each of the " + std::to_string(ranks) + " ranks";
  });
  *sum = 0;
  for (size_t j = 0; j < n && checks.ok(); ++j) {
    checks.require(counts[j] <= SIZE_MAX / elementBytes - *sum, [&] {
      return std::string(what) + " sum to more elements than a buffer can hold";
    });
    if (checks.ok()) *sum += counts[j];
  }
  return checks.ok();
}

}  // namespace

CallArguments reductionCall(const void* const* leaves, int nleaves, bool single, void* recv,
                            size_t count, int dtype, int op) {
  CallArguments args;
  args.leaves = leaves;
  args.nleaves = nleaves;
  args.namedLeaves = !single;
  args.recv = recv;
  args.count = count;
  args.dtype = dtype;
  args.op = op;
  return args;
}

CallArguments broadcastCall(void* buf, size_t count, int dtype, int root) {
  CallArguments args;
  args.kind = CallKind::kBroadcast;
  args.recv = buf;
  args.count = count;
  args.dtype = dtype;
  args.root = root;
  return args;
}

CallArguments allgatherCall(const void* send, void* recv, size_t count, int dtype) {
  CallArguments args;
  args.kind = CallKind::kAllgather;
  args.send = send;
  args.recv = recv;
  args.count = count;
  args.dtype = dtype;
  return args;
}

Status checkCall(const CallArguments& c, int rank, int size) {
  Checks checks;
  checks.require(isValidDataType(c.dtype),
                 [&] { return "unknown dtype " + std::to_string(c.dtype); });
  if (!checks.ok()) return checks.status();
  const size_t es = dataTypeSize(static_cast<DataType>(c.dtype));
  const size_t p = static_cast<size_t>(size);
  const size_t factor = c.kind == CallKind::kAllgather ? p : 1;
  checks.require(c.count <= SIZE_MAX / es / factor, [&] {
    return "count " + std::to_string(c.count) + " overflows the size of a buffer";
  });
  if (!checks.ok()) return checks.status();
  const size_t bytes = c.count * es;
  switch (c.kind) {
    case CallKind::kAllreduce: {
      checks.require(isValidReduceOp(c.op),
                     [&] { return "unknown reduction op " + std::to_string(c.op); });
      checks.require(c.leaves != nullptr, [&] { return "leaves is null"; });
      checks.require(c.nleaves >= 1 && c.nleaves <= kMaxLeavesPerRank, [&] {
        return "nleaves is " + std::to_string(c.nleaves) + "; a rank contributes 1 to " +
               std::to_string(kMaxLeavesPerRank) + " leaves";
      });
      if (!checks.ok()) return checks.status();
      auto leafName = [&](int l) {
        return c.namedLeaves ? "leaves[" + std::to_string(l) + "]" : std::string("sendbuf");
      };
      for (int l = 0; l < c.nleaves; ++l) {
        checks.require(c.count == 0 || c.leaves[l] != nullptr,
                       [&] { return leafName(l) + whileCount(c.count); });
      }
      checks.require(c.count == 0 || c.recv != nullptr,
                     [&] { return "recvbuf" + whileCount(c.count); });
      for (int l = 0; l < c.nleaves; ++l) {
        checks.require(!overlapsPartially(c.leaves[l], bytes, c.recv, bytes), [&] {
          return leafName(l) + " and recvbuf overlap without being the same buffer";
        });
      }
      break;
    }
    case CallKind::kBroadcast:
      checks.require(c.count == 0 || c.recv != nullptr,
                     [&] { return "buf" + whileCount(c.count); });
      checks.require(c.root >= 0 && c.root < size, [&] {
        return "root " + std::to_string(c.root) + " is not a rank of a world of " +
               std::to_string(size);
      });
      break;
    case CallKind::kAllgather: {
      checks.require(c.count == 0 || c.send != nullptr,
                     [&] { return "sendbuf" + whileCount(c.count); });
      checks.require(c.count == 0 || c.recv != nullptr,
                     [&] { return "recvbuf" + whileCount(c.count); });
      const char* slot = static_cast<const char*>(c.recv) + rank * bytes;
      checks.require(c.send == slot || !overlapsPartially(c.send, bytes, c.recv, bytes * p),
                     [&] { return "sendbuf overlaps recvbuf other than at this rank's slot"; });
      break;
    }
    case CallKind::kReducescatter: {
      checks.require(isValidReduceOp(c.op),
                     [&] { return "unknown reduction op " + std::to_string(c.op); });
      uint64_t total = 0;
      if (!sumCounts(checks, "counts", c.counts, c.ncounts, p, es, &total)) break;
      const size_t mine = c.counts[rank];
      checks.require(total == 0 || c.send != nullptr,
                     [&] { return "sendbuf" + whileCount(total); });
      checks.require(mine == 0 || c.recv != nullptr, [&] {
        return "recvbuf is null while this rank's block has " + std::to_string(mine) + " elements";
      });
      checks.require(!overlapsAtAll(c.send, total * es, c.recv, mine * es),
                     [&] { return "sendbuf and recvbuf overlap"; });
      break;
    }
    case CallKind::kAlltoall: {
      uint64_t out = 0;
      uint64_t in = 0;
      if (!sumCounts(checks, "send counts", c.counts, c.ncounts, p, es, &out) ||
          !sumCounts(checks, "receive counts", c.recvCounts, c.ncounts, p, es, &in)) {
        break;
      }
      checks.require(out == 0 || c.send != nullptr, [&] { return "sendbuf" + whileCount(out); });
      checks.require(in == 0 || c.recv != nullptr, [&] { return "recvbuf" + whileCount(in); });
      checks.require(!overlapsAtAll(c.send, out * es, c.recv, in * es),
                     [&] { return "sendbuf and recvbuf overlap"; });
      break;
    }
    default:
      break;
  }
  return checks.status();
}

}  // namespace detcoll::collective
