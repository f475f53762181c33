#include "collective/call_agreement.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>

#include "collective/tags.h"
#include "common/dtype.h"
#include "common/hash.h"

namespace detcoll::collective {
namespace {

constexpr uint16_t kMagic = 0xDC01;

// What every call sends: 32 bytes, small enough for the transports' fastest path.
struct WireHeader {
  uint16_t magic;
  uint8_t kind;
  uint8_t status;  // StatusCode of the rank's local checks
  uint8_t mode;
  uint8_t dtype;  // raw values, clamped to 255: only compared when every rank's checks passed
  uint8_t op;
  uint8_t device;  // the buffers are device memory
  int32_t root;
  uint16_t payloadBytes;  // at most kInlineBytes
  uint16_t leaves;
  uint64_t count;
  uint64_t nameHash;
};
static_assert(sizeof(WireHeader) == 32);

// Sent only when the verdict is a failure, to word the message.
struct WireDetail {
  char name[64];
  char error[192];
};

constexpr size_t kSlot = sizeof(WireHeader) + CallAgreement::kInlineBytes;

uint8_t clampByte(int value) {
  return static_cast<uint8_t>(value < 0 || value > 255 ? 255 : value);
}

void copyText(char* out, size_t capacity, std::string_view text) {
  const size_t n = std::min(capacity - 1, text.size());
  std::memcpy(out, text.data(), n);
  std::memset(out + n, 0, capacity - n);
}

std::string text(const char* field, size_t capacity) {
  return std::string(field, strnlen(field, capacity));
}

const char* kindName(int kind) {
  switch (static_cast<CallKind>(kind)) {
    case CallKind::kInit:
      return "init";
    case CallKind::kAllreduce:
      return "allreduce";
    case CallKind::kBroadcast:
      return "broadcast";
    case CallKind::kAllgather:
      return "allgather";
    case CallKind::kSeed:
      return "seed agreement";
    case CallKind::kRestoreState:
      return "random state restore";
  }
  return "unknown call";
}

struct RankView {
  const WireHeader* header;
  const WireDetail* detail;
};

std::string describeCall(const RankView& v) {
  std::string s = kindName(v.header->kind);
  const std::string name = text(v.detail->name, sizeof(v.detail->name));
  if (!name.empty()) s += " '" + name + "'";
  return s;
}

// "rank 0: a, rank 1: b, ..." listing every rank's value of one field (at most 8 ranks shown).
std::string listValues(const std::vector<RankView>& all,
                       const std::function<std::string(const RankView&)>& show) {
  std::string s;
  const size_t shown = std::min<size_t>(all.size(), 8);
  for (size_t j = 0; j < shown; ++j) {
    if (j > 0) s += ", ";
    s += "rank " + std::to_string(j) + ": " + show(all[j]);
  }
  if (shown < all.size()) s += ", ...";
  return s;
}

bool headersAgree(const char* slots, size_t slot, int p) {
  const WireHeader& f = *reinterpret_cast<const WireHeader*>(slots);
  for (int j = 0; j < p; ++j) {
    const WireHeader* h = reinterpret_cast<const WireHeader*>(slots + j * slot);
    if (h->magic != kMagic || h->status != 0 || h->kind != f.kind || h->nameHash != f.nameHash ||
        h->mode != f.mode || h->dtype != f.dtype || h->op != f.op || h->count != f.count ||
        h->root != f.root || h->device != f.device) {
      return false;
    }
  }
  return true;
}

// The failure every rank words identically from the same headers and details.
Status failure(const std::vector<RankView>& all) {
  for (size_t j = 0; j < all.size(); ++j) {
    if (all[j].header->magic != kMagic) {
      return Status::internal("rank " + std::to_string(j) +
                              " sent a call description detcoll does not recognise");
    }
  }
  const RankView& first = all[0];
  // Local failures first: they say what is wrong most precisely. Ranks with the same message are
  // listed together.
  std::vector<std::pair<std::string, std::vector<size_t>>> groups;  // message, ranks
  int failing = 0;
  StatusCode code = StatusCode::kSuccess;
  for (size_t j = 0; j < all.size(); ++j) {
    if (all[j].header->status == 0) continue;
    if (failing++ == 0) code = static_cast<StatusCode>(all[j].header->status);
    const std::string message = text(all[j].detail->error, sizeof(all[j].detail->error));
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == message; });
    if (it == groups.end()) {
      groups.push_back({message, {j}});
    } else {
      it->second.push_back(j);
    }
  }
  if (failing > 0) {
    std::string listed;
    for (size_t g = 0; g < groups.size() && g < 4; ++g) {
      const auto& ranks = groups[g].second;
      listed += (g > 0 ? "; " : "") + std::string(ranks.size() > 1 ? "ranks " : "rank ");
      for (size_t k = 0; k < ranks.size(); ++k)
        listed += (k > 0 ? ", " : "") + std::to_string(ranks[k]);
      listed += ": " + groups[g].first;
    }
    if (groups.size() > 4) listed += "; and " + std::to_string(groups.size() - 4) + " more";
    return Status(code, describeCall(first) + " failed on " + std::to_string(failing) + " of " +
                            std::to_string(all.size()) + " ranks: " + listed);
  }
  auto differs = [&](auto field) {
    return std::any_of(all.begin(), all.end(),
                       [&](const RankView& v) { return field(*v.header) != field(*first.header); });
  };
  auto mismatch = [&](const std::string& what,
                      const std::function<std::string(const RankView&)>& show) {
    return Status::mismatch(describeCall(first) + ": " + what + " differs across ranks (" +
                            listValues(all, show) + ")");
  };
  if (differs([](const WireHeader& h) { return h.kind; })) {
    return Status::mismatch("ranks are making different calls (" + listValues(all, describeCall) +
                            ")");
  }
  if (differs([](const WireHeader& h) { return h.nameHash; })) {
    return mismatch("the tensor name", [](const RankView& v) {
      return "'" + text(v.detail->name, sizeof(v.detail->name)) + "'";
    });
  }
  if (differs([](const WireHeader& h) { return h.mode; })) {
    return mismatch("the determinism mode",
                    [](const RankView& v) { return modeName(static_cast<Mode>(v.header->mode)); });
  }
  if (differs([](const WireHeader& h) { return h.dtype; })) {
    return mismatch("the dtype", [](const RankView& v) {
      return dataTypeName(static_cast<DataType>(v.header->dtype));
    });
  }
  if (differs([](const WireHeader& h) { return h.op; })) {
    return mismatch("the reduction op", [](const RankView& v) {
      return reduceOpName(static_cast<ReduceOp>(v.header->op));
    });
  }
  if (differs([](const WireHeader& h) { return h.count; })) {
    return mismatch("the element count",
                    [](const RankView& v) { return std::to_string(v.header->count); });
  }
  if (differs([](const WireHeader& h) { return h.root; })) {
    return mismatch("the root rank",
                    [](const RankView& v) { return std::to_string(v.header->root); });
  }
  if (differs([](const WireHeader& h) { return h.device; })) {
    return mismatch("where the buffers live", [](const RankView& v) {
      return std::string(v.header->device ? "device memory" : "host memory");
    });
  }
  return Status::internal("call descriptions disagree in a way detcoll cannot name");
}

// Every rank sends the same number of messages of a fixed capacity to every other rank.
Status exchangeAll(Communicator& comm, std::vector<std::unique_ptr<Transfer>>& requests,
                   char* slots, size_t slot, size_t bytes, int tag) {
  const int p = comm.size();
  const int rank = comm.rank();
  requests.clear();
  for (int j = 0; j < p; ++j) {
    if (j != rank) requests.push_back(comm.irecv(slots + j * slot, slot, j, tag));
  }
  for (int j = 0; j < p; ++j) {
    if (j != rank) requests.push_back(comm.isend(slots + rank * slot, bytes, j, tag));
  }
  Status status = waitAll(requests.data(), requests.size());
  requests.clear();
  return status;
}

}  // namespace

Status CallAgreement::agree(Communicator& comm, const CallDescription& mine, const void* payload,
                            size_t payloadBytes) {
  const int p = comm.size();
  rank_ = comm.rank();
  if (payloadBytes > kInlineBytes) return Status::internal("inline payload too large");
  WireHeader h{};
  h.magic = kMagic;
  h.kind = static_cast<uint8_t>(mine.kind);
  h.status = static_cast<uint8_t>(mine.local.code());
  h.mode = clampByte(mine.mode);
  h.dtype = clampByte(mine.dtype);
  h.op = clampByte(mine.op);
  h.device = mine.device ? 1 : 0;
  h.root = mine.root;
  h.payloadBytes = static_cast<uint16_t>(mine.local.isOk() ? payloadBytes : 0);
  h.leaves = static_cast<uint16_t>(mine.leaves);
  h.count = mine.count;
  h.nameHash = hashName(mine.name);

  if (slots_.size() < p * kSlot) slots_.resize(p * kSlot);
  char* own = slots_.data() + rank_ * kSlot;
  std::memcpy(own, &h, sizeof(h));
  if (h.payloadBytes > 0) std::memcpy(own + sizeof(h), payload, h.payloadBytes);
  DETCOLL_RETURN_IF_ERROR(exchangeAll(comm, requests_, slots_.data(), kSlot,
                                      sizeof(h) + h.payloadBytes, kTagAgreement));
  if (headersAgree(slots_.data(), kSlot, p)) return Status::ok();

  // Every rank saw the same headers, so every rank takes this path: exchange the names and
  // error texts and word the failure.
  std::vector<char> details(p * sizeof(WireDetail));
  WireDetail& d = *reinterpret_cast<WireDetail*>(details.data() + rank_ * sizeof(WireDetail));
  copyText(d.name, sizeof(d.name), mine.name);
  copyText(d.error, sizeof(d.error), mine.local.message());
  DETCOLL_RETURN_IF_ERROR(exchangeAll(comm, requests_, details.data(), sizeof(WireDetail),
                                      sizeof(WireDetail), kTagAgreement));
  std::vector<RankView> all(p);
  for (int j = 0; j < p; ++j) {
    all[j] = {reinterpret_cast<const WireHeader*>(slots_.data() + j * kSlot),
              reinterpret_cast<const WireDetail*>(details.data() + j * sizeof(WireDetail))};
  }
  return failure(all);
}

size_t CallAgreement::payloadBytes(int rank) const {
  return reinterpret_cast<const WireHeader*>(slots_.data() + rank * kSlot)->payloadBytes;
}

int CallAgreement::leaves(int rank) const {
  return reinterpret_cast<const WireHeader*>(slots_.data() + rank * kSlot)->leaves;
}

const void* CallAgreement::payload(int rank) const {
  return slots_.data() + rank * kSlot + sizeof(WireHeader);
}

}  // namespace detcoll::collective
