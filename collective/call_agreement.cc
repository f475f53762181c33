#include "collective/call_agreement.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>

#include "collective/tags.h"
#include "collective/transport/record_board.h"
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
static_assert(sizeof(WireHeader) == CallAgreement::kHeaderBytes);
static_assert(CallAgreement::kRecordBytes <= transport::RecordBoard::kAgreementCapacity,
              "a call's record fits a record board's slot");

constexpr size_t kSlot = CallAgreement::kRecordBytes;

// A header agree() could have sent: the magic, a status code, at least one leaf, no more payload
// than a record holds. Anything else came from another program or from damaged memory.
bool wellFormed(const WireHeader& h) {
  return h.magic == kMagic && h.status <= static_cast<uint8_t>(StatusCode::kInternal) &&
         h.leaves >= 1 && h.payloadBytes <= CallAgreement::kInlineBytes;
}

WireHeader headerOf(const char* record) {
  WireHeader h;
  std::memcpy(&h, record, sizeof h);
  return h;
}

uint8_t clampByte(int value) {
  return static_cast<uint8_t>(value < 0 || value > 255 ? 255 : value);
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
    case CallKind::kValue:
      return "";
    case CallKind::kReducescatter:
      return "reducescatter";
    case CallKind::kAlltoall:
      return "alltoall";
  }
  return "unknown call";
}

// One rank's record and, when the verdict is a failure, its texts.
struct RankView {
  const WireHeader* header;
  std::string name;
  std::string error;
};

std::string describeCall(const RankView& v) {
  if (v.header->kind == static_cast<uint8_t>(CallKind::kValue)) return v.name;
  std::string s = kindName(v.header->kind);
  if (!v.name.empty()) s += " '" + v.name + "'";
  return s;
}

// The failure every rank words identically from the same headers and texts.
Status failure(const std::vector<RankView>& all) {
  const int p = static_cast<int>(all.size());
  for (int j = 0; j < p; ++j) {
    if (!wellFormed(*all[j].header)) {
      return Status::internal("rank " + std::to_string(j) +
                              " sent a call description detcoll does not recognise");
    }
  }
  const RankView& first = all[0];
  // Local failures first: they say what is wrong most precisely.
  std::vector<Status> local(p);
  int failing = 0;
  for (int j = 0; j < p; ++j) {
    if (all[j].header->status == 0) continue;
    ++failing;
    local[j] = Status(static_cast<StatusCode>(all[j].header->status), all[j].error);
  }
  if (failing > 0) {
    const Status v = verdict(local);
    return Status(v.code(), describeCall(first) + " failed on " + std::to_string(failing) + " of " +
                                std::to_string(p) + " ranks: " + v.message());
  }
  // Then the first field that differs, each value with the ranks that gave it.
  auto differs = [&](auto field) {
    return std::any_of(all.begin(), all.end(),
                       [&](const RankView& v) { return field(*v.header) != field(*first.header); });
  };
  auto listed = [&](auto field, const std::function<std::string(const RankView&)>& show) {
    const RankGroups groups =
        groupRanks(p, [&](int a, int b) { return field(*all[a].header) == field(*all[b].header); });
    return describeGroups(
        groups, [&](int r) { return show(all[r]); }, Phrase::kValueOnRanks);
  };
  auto mismatch = [&](const std::string& what, auto field,
                      const std::function<std::string(const RankView&)>& show) {
    return Status::mismatch(describeCall(first) + ": " + what + " differs across ranks (" +
                            listed(field, show) + ")");
  };
  // Which call: its kind, and for an agreement on a value the name, which says what it is.
  const auto call = [](const WireHeader& h) {
    const bool value = h.kind == static_cast<uint8_t>(CallKind::kValue);
    return std::make_pair(h.kind, value ? h.nameHash : 0);
  };
  if (differs(call)) {
    return Status::mismatch("ranks are making different calls (" + listed(call, describeCall) +
                            ")");
  }
  const auto nameHash = [](const WireHeader& h) { return h.nameHash; };
  if (differs(nameHash)) {
    return mismatch("the tensor name", nameHash,
                    [](const RankView& v) { return "'" + v.name + "'"; });
  }
  if (differs([](const WireHeader& h) { return h.mode; })) {
    return mismatch(
        "the determinism mode", [](const WireHeader& h) { return h.mode; },
        [](const RankView& v) { return modeName(static_cast<Mode>(v.header->mode)); });
  }
  if (differs([](const WireHeader& h) { return h.dtype; })) {
    return mismatch(
        "the dtype", [](const WireHeader& h) { return h.dtype; },
        [](const RankView& v) { return dataTypeName(static_cast<DataType>(v.header->dtype)); });
  }
  if (differs([](const WireHeader& h) { return h.op; })) {
    return mismatch(
        "the reduction op", [](const WireHeader& h) { return h.op; },
        [](const RankView& v) { return reduceOpName(static_cast<ReduceOp>(v.header->op)); });
  }
  if (differs([](const WireHeader& h) { return h.count; })) {
    return mismatch(
        "the element count", [](const WireHeader& h) { return h.count; },
        [](const RankView& v) { return std::to_string(v.header->count); });
  }
  if (differs([](const WireHeader& h) { return h.root; })) {
    return mismatch(
        "the root rank", [](const WireHeader& h) { return h.root; },
        [](const RankView& v) { return std::to_string(v.header->root); });
  }
  if (differs([](const WireHeader& h) { return h.device; })) {
    return mismatch(
        "where the buffers live", [](const WireHeader& h) { return h.device; },
        [](const RankView& v) {
          return std::string(v.header->device ? "device memory" : "host memory");
        });
  }
  return Status::internal("call descriptions disagree in a way detcoll cannot name");
}

}  // namespace

Status CallAgreement::agree(transport::Communicator& comm, const CallDescription& mine,
                            const void* payload, size_t payloadBytes) {
  const void* leaves[1] = {payload};
  return agree(comm, mine, leaves, payloadBytes > 0 ? 1 : 0, payloadBytes);
}

Status CallAgreement::agree(transport::Communicator& comm, const CallDescription& mine,
                            const void* const* leaves, int nleaves, size_t leafBytes) {
  const int p = comm.size();
  const size_t payloadBytes = static_cast<size_t>(nleaves) * leafBytes;
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

  // The leaves first, then the header, whose line the exchange then marks posted: written
  // together, while the peers polling that line are kept waiting the least.
  char* record = agreement_.draft(comm, kSlot);
  for (int l = 0; l < nleaves && h.payloadBytes > 0; ++l) {
    std::memcpy(record + sizeof(h) + l * leafBytes, leaves[l], leafBytes);
  }
  std::memcpy(record, &h, sizeof(h));
  DETCOLL_RETURN_IF_ERROR(agreement_.exchangeRecords(comm, record, sizeof(h) + h.payloadBytes,
                                                     kSlot, sizeof(WireHeader)));
  // This rank's header from its own copy (callRecordsAgree reads headers only): its slot on a
  // record board has just been read by the peers, which may have taken its lines with them.
  std::memcpy(ownHeader_, &h, sizeof h);
  headers_.resize(p);
  for (int j = 0; j < p; ++j) headers_[j] = j == comm.rank() ? ownHeader_ : agreement_.record(j);
  if (callRecordsAgree(headers_)) return Status::ok();
  std::vector<const char*> records(p);
  for (int j = 0; j < p; ++j) records[j] = agreement_.record(j);

  // Every rank saw the same headers, so every rank takes this path: exchange the names and
  // error texts and word the failure.
  std::vector<std::vector<std::string>> texts;
  DETCOLL_RETURN_IF_ERROR(
      agreement_.exchangeTexts(comm, {std::string(mine.name), mine.local.message()}, &texts));
  return callFailure(records, texts);
}

bool callRecordsAgree(const std::vector<const char*>& records) {
  if (records.empty()) return true;
  const WireHeader f = headerOf(records[0]);
  for (const char* record : records) {
    const WireHeader h = headerOf(record);
    if (!wellFormed(h) || h.status != 0 || h.kind != f.kind || h.nameHash != f.nameHash ||
        h.mode != f.mode || h.dtype != f.dtype || h.op != f.op || h.count != f.count ||
        h.root != f.root || h.device != f.device) {
      return false;
    }
  }
  return true;
}

Status callFailure(const std::vector<const char*>& records,
                   const std::vector<std::vector<std::string>>& texts) {
  const size_t p = records.size();
  if (p == 0) return Status::internal("a call agreement without ranks");
  std::vector<WireHeader> headers(p);
  std::vector<RankView> all(p);
  for (size_t j = 0; j < p; ++j) {
    headers[j] = headerOf(records[j]);
    all[j].header = &headers[j];
    if (j < texts.size() && texts[j].size() == 2) {
      all[j].name = texts[j][0];
      all[j].error = texts[j][1];
    }
  }
  return failure(all);
}

size_t CallAgreement::payloadBytes(int rank) const {
  return headerOf(headers_[rank]).payloadBytes;
}

int CallAgreement::leaves(int rank) const {
  return headerOf(headers_[rank]).leaves;
}

const void* CallAgreement::payload(int rank) const {
  return agreement_.record(rank) + sizeof(WireHeader);
}

}  // namespace detcoll::collective
