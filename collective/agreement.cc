#include "collective/agreement.h"

#include <algorithm>
#include <cstring>

#include "collective/tags.h"
#include "collective/transport/record_board.h"

namespace detcoll::collective {

std::string describeRanks(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

RankGroups groupRanks(int n, const std::function<bool(int a, int b)>& same) {
  RankGroups groups;
  for (int r = 0; r < n; ++r) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const std::vector<int>& g) { return same(g.front(), r); });
    if (it == groups.end()) {
      groups.push_back({r});
    } else {
      it->push_back(r);
    }
  }
  return groups;
}

std::string describeGroups(const RankGroups& groups, const std::function<std::string(int)>& valueOf,
                           Phrase phrase) {
  std::string text;
  const size_t shown = std::min(groups.size(), kShownGroups);
  for (size_t g = 0; g < shown; ++g) {
    const std::vector<int>& ranks = groups[g];
    const std::string value = valueOf(ranks.front());
    if (g > 0) text += "; ";
    switch (phrase) {
      case Phrase::kRanksThenValue:
        text += describeRanks(ranks) + ": " + value;
        break;
      case Phrase::kValueOnRanks:
        text += value + " on " + describeRanks(ranks);
        break;
      case Phrase::kRanksHaveValue:
        text += describeRanks(ranks) + (ranks.size() == 1 ? " has " : " have ") + value;
        break;
    }
  }
  if (groups.size() > shown) text += "; and " + std::to_string(groups.size() - shown) + " more";
  return text;
}

Status verdict(const std::vector<Status>& statuses) {
  std::vector<int> failing;
  for (int r = 0; r < static_cast<int>(statuses.size()); ++r) {
    if (!statuses[r].isOk()) failing.push_back(r);
  }
  if (failing.empty()) return Status::ok();
  const RankGroups groups = groupRanks(static_cast<int>(failing.size()), [&](int a, int b) {
    return statuses[failing[a]].message() == statuses[failing[b]].message();
  });
  // Groups of indices into `failing`, worded with the ranks they stand for.
  RankGroups ranks;
  for (const auto& group : groups) {
    ranks.emplace_back();
    for (int i : group) ranks.back().push_back(failing[i]);
  }
  return Status(statuses[failing.front()].code(),
                describeGroups(
                    ranks, [&](int r) { return statuses[r].message(); }, Phrase::kRanksThenValue));
}

namespace {

// A packet: its header, then per entry its length (8 bytes) and its bytes; or the header and a
// failure (docs/design.md, "Agreement").
struct PacketHeader {
  uint32_t magic;
  uint32_t entries;  // kFailed: a failure follows, its status code (1 byte) and its message
  uint64_t bytes;    // the whole packet's
};
constexpr uint32_t kPacketMagic = 0xDCA61EE5;
constexpr uint32_t kFailed = 0xFFFFFFFF;
constexpr size_t kLength = sizeof(uint64_t);
// Every receive takes at least this much, so that a failure's message fits (cut to fit).
constexpr size_t kLeastReceive = 512;
constexpr size_t kPieceBytes = Agreement::kPieceBytes;
// How much longer than the communicator's patience a rank waits for a message its peer sends only
// after hearing from others (every round after the first): the rank that waits for a silent rank
// in the first round gives up first, and its notice names that rank.
constexpr double kForwardedGraceSeconds = 2;
// The most bytes of texts all ranks together may send.
constexpr uint64_t kMostTextBytes = uint64_t{1} << 30;

Status unreadable(int from, size_t bytes) {
  return Status::mismatch("rank " + std::to_string(from) + " sent an agreement message of " +
                          std::to_string(bytes) +
                          " bytes that this agreement cannot read: the ranks are in different "
                          "agreements");
}

Status tooLong(int rank, uint64_t bytes, size_t capacity) {
  return Status::mismatch("rank " + std::to_string(rank) + " sent a record of " +
                          std::to_string(bytes) + " bytes where this agreement's take at most " +
                          std::to_string(capacity) + ": the ranks are in different agreements");
}

}  // namespace

void Agreement::pack(int p, int first, int n, const char* slots, const std::vector<size_t>& sizes,
                     std::vector<char>* packet) const {
  size_t total = sizeof(PacketHeader);
  for (int i = 0; i < n; ++i) total += kLength + sizes[(first + i) % p];
  packet->resize(total);
  char* at = packet->data();
  const PacketHeader header{kPacketMagic, static_cast<uint32_t>(n), total};
  std::memcpy(at, &header, sizeof header);
  at += sizeof header;
  for (int i = 0; i < n; ++i) {
    const int j = (first + i) % p;
    const uint64_t length = sizes[j];
    std::memcpy(at, &length, kLength);
    at += kLength;
    if (length > 0) std::memcpy(at, slots + offsets_[j], length);
    at += length;
  }
}

Status Agreement::unpack(int p, int from, int n, const char* packet, size_t bytes, char* slots,
                         std::vector<size_t>* sizes) const {
  PacketHeader header;
  if (bytes < sizeof header) return unreadable(from, bytes);
  std::memcpy(&header, packet, sizeof header);
  if (header.magic != kPacketMagic) return unreadable(from, bytes);
  const char* at = packet + sizeof header;
  const char* end = packet + bytes;
  if (header.entries == kFailed) {
    // A rank before this one failed: its status, passed on as it is.
    if (at == end) return unreadable(from, bytes);
    int code = static_cast<unsigned char>(*at);
    if (code <= static_cast<int>(StatusCode::kSuccess) ||
        code > static_cast<int>(StatusCode::kInternal)) {
      code = static_cast<int>(StatusCode::kInternal);
    }
    return Status(static_cast<StatusCode>(code), std::string(at + 1, end));
  }
  if (header.entries != static_cast<uint32_t>(n)) return unreadable(from, bytes);
  for (int i = 0; i < n; ++i) {
    const int j = (from + i) % p;
    if (end - at < static_cast<std::ptrdiff_t>(kLength)) return unreadable(from, bytes);
    uint64_t length = 0;
    std::memcpy(&length, at, kLength);
    at += kLength;
    if (length > capacities_[j]) return tooLong(j, length, capacities_[j]);
    if (length > static_cast<uint64_t>(end - at)) return unreadable(from, bytes);
    if (length > 0) std::memcpy(slots + offsets_[j], at, length);
    (*sizes)[j] = length;
    at += length;
  }
  return at == end ? Status::ok() : unreadable(from, bytes);
}

Status Agreement::gather(transport::Communicator& comm, char* slots, std::vector<size_t>* sizes) {
  const int p = comm.size();
  const int rank = comm.rank();
  int rounds = 0;
  while ((1 << rounds) < p) ++rounds;
  if (sent_.size() < static_cast<size_t>(rounds)) sent_.resize(rounds);
  sends_.clear();
  Status status;
  for (int k = 0; k < rounds; ++k) {
    const int distance = 1 << k;
    const int to = (rank - distance + p) % p;
    const int from = (rank + distance) % p;
    // Ranks rank .. rank + n - 1 travel to `to`; ranks from .. from + n - 1 come from `from`.
    const int n = std::min(distance, p - distance);
    size_t capacity = sizeof(PacketHeader);
    for (int i = 0; i < n; ++i) capacity += kLength + capacities_[(from + i) % p];
    capacity = std::max(capacity, kLeastReceive);
    if (received_.size() < capacity) received_.resize(capacity);
    std::unique_ptr<transport::Transfer> receive =
        comm.irecv(received_.data(), std::min(capacity, kPieceBytes), from, kTagAgreement);
    std::vector<char>& packet = sent_[k];
    if (status.isOk()) {
      pack(p, rank, n, slots, *sizes, &packet);
    } else {
      // The failure instead of records, cut to what the receive takes.
      const std::string& why = status.message();
      const size_t text = std::min(why.size(), kLeastReceive - sizeof(PacketHeader) - 1);
      packet.resize(sizeof(PacketHeader) + 1 + text);
      const PacketHeader header{kPacketMagic, kFailed, packet.size()};
      std::memcpy(packet.data(), &header, sizeof header);
      packet[sizeof header] = static_cast<char>(status.code());
      std::memcpy(packet.data() + sizeof header + 1, why.data(), text);
    }
    for (size_t at = 0; at < packet.size(); at += kPieceBytes) {
      sends_.push_back(comm.isend(packet.data() + at, std::min(kPieceBytes, packet.size() - at), to,
                                  kTagAgreement));
    }
    // Every round's message is waited for, even after a failure.
    const double grace = k == 0 ? 0 : kForwardedGraceSeconds;
    size_t bytes = 0;
    Status got = receive->waitWithGrace(&bytes, grace);
    if (got.isOk()) got = receiveRest(comm, from, capacity, grace, &bytes);
    if (!status.isOk()) continue;
    status = got.isOk() ? unpack(p, from, n, received_.data(), bytes, slots, sizes) : got;
  }
  const Status sent = transport::waitAll(sends_.data(), sends_.size());
  sends_.clear();
  return status.isOk() ? sent : status;
}

Status Agreement::receiveRest(transport::Communicator& comm, int from, size_t capacity,
                              double grace, size_t* bytes) {
  // A first piece shorter than a whole piece is the whole packet; so is anything unreadable,
  // which unpack() then reports.
  PacketHeader header;
  if (*bytes < kPieceBytes || *bytes < sizeof header) return Status::ok();
  std::memcpy(&header, received_.data(), sizeof header);
  if (header.magic != kPacketMagic || header.bytes <= *bytes) return Status::ok();
  if (header.bytes > capacity) return unreadable(from, static_cast<size_t>(header.bytes));
  const size_t total = static_cast<size_t>(header.bytes);
  std::vector<std::unique_ptr<transport::Transfer>> rest;
  for (size_t at = *bytes; at < total; at += kPieceBytes) {
    rest.push_back(
        comm.irecv(received_.data() + at, std::min(kPieceBytes, total - at), from, kTagAgreement));
  }
  Status status;
  for (auto& piece : rest) {
    size_t got = 0;
    const Status waited = piece->waitWithGrace(&got, grace);  // every piece, even after a failure
    if (status.isOk()) status = waited;
    *bytes += got;
  }
  return status.isOk() && *bytes != total ? unreadable(from, *bytes) : status;
}

Status Agreement::exchangeRecords(transport::Communicator& comm, const void* record, size_t bytes,
                                  size_t capacity, size_t minimum) {
  const int p = comm.size();
  const int rank = comm.rank();
  if (bytes > capacity) return Status::internal("an agreement record exceeds its capacity");
  at_.resize(p);
  sizes_.resize(p);
  if (transport::RecordBoard* board = comm.board()) {
    if (capacity > board->capacity()) {
      return Status::internal("an agreement's records exceed the record board's");
    }
    DETCOLL_RETURN_IF_ERROR(board->exchange(record, bytes));
    for (int j = 0; j < p; ++j) {
      at_[j] = board->record(j);
      // Not this rank's own slot: its lines may have gone to the peers that read them.
      sizes_[j] = j == rank ? bytes : board->recordBytes(j);
    }
    return checkSizes(p, capacity, minimum);
  }
  char* own = draft(comm, capacity);  // no board here: this rank's slot in records_
  if (bytes > 0 && own != record) std::memcpy(own, record, bytes);
  offsets_.resize(p);
  for (int j = 0; j < p; ++j) {
    offsets_[j] = j * capacity;
    at_[j] = records_.data() + j * capacity;
  }
  capacities_.assign(p, capacity);
  sizes_.assign(p, 0);
  sizes_[rank] = bytes;
  DETCOLL_RETURN_IF_ERROR(gather(comm, records_.data(), &sizes_));
  return checkSizes(p, capacity, minimum);
}

char* Agreement::draft(transport::Communicator& comm, size_t capacity) {
  if (transport::RecordBoard* board = comm.board()) return board->nextRecord();
  const size_t p = static_cast<size_t>(comm.size());
  if (records_.size() < p * capacity) records_.resize(p * capacity);
  return records_.data() + comm.rank() * capacity;
}

Status Agreement::checkSizes(int p, size_t capacity, size_t minimum) const {
  for (int j = 0; j < p; ++j) {
    // A record longer than this agreement's capacity (the board's slots hold any agreement's),
    // or shorter than any of its records, is another agreement's: ranks out of step.
    if (sizes_[j] > capacity) return tooLong(j, sizes_[j], capacity);
    if (sizes_[j] < minimum) {
      return Status::mismatch("rank " + std::to_string(j) + " sent a record of " +
                              std::to_string(sizes_[j]) + " bytes where this agreement's " +
                              "take at least " + std::to_string(minimum) +
                              ": the ranks are in different agreements");
    }
  }
  return Status::ok();
}

Status Agreement::exchangeTexts(transport::Communicator& comm, const std::vector<std::string>& mine,
                                std::vector<std::vector<std::string>>* all) {
  const int p = comm.size();
  const int rank = comm.rank();
  // This rank's texts as one blob: each text's length (8 bytes), then its characters.
  std::vector<char> blob;
  for (const std::string& text : mine) {
    const uint64_t n = text.size();
    blob.insert(blob.end(), reinterpret_cast<const char*>(&n),
                reinterpret_cast<const char*>(&n) + sizeof n);
    blob.insert(blob.end(), text.begin(), text.end());
  }
  // First every blob's size, then the blobs, each received into exactly its size.
  std::vector<uint64_t> blobSizes(p, 0);
  blobSizes[rank] = blob.size();
  offsets_.resize(p);
  for (int j = 0; j < p; ++j) offsets_[j] = j * sizeof(uint64_t);
  capacities_.assign(p, sizeof(uint64_t));
  std::vector<size_t> received(p, 0);
  received[rank] = sizeof(uint64_t);
  DETCOLL_RETURN_IF_ERROR(gather(comm, reinterpret_cast<char*>(blobSizes.data()), &received));
  uint64_t total = 0;
  for (int j = 0; j < p; ++j) {
    if (received[j] != sizeof(uint64_t)) {
      return Status::mismatch("rank " + std::to_string(j) + " sent " + std::to_string(received[j]) +
                              " bytes where this agreement takes " +
                              "the size of its texts: the ranks are in different agreements");
    }
    // Texts are names and messages: a size past kMostTextBytes is another agreement's bytes.
    if (blobSizes[j] > kMostTextBytes - total) {
      return Status::mismatch("rank " + std::to_string(j) + " sent texts of " +
                              std::to_string(blobSizes[j]) +
                              " bytes: the ranks are in different agreements");
    }
    offsets_[j] = total;
    capacities_[j] = blobSizes[j];
    total += blobSizes[j];
  }
  std::vector<char> blobs(std::max<size_t>(1, total));
  if (!blob.empty()) std::memcpy(blobs.data() + offsets_[rank], blob.data(), blob.size());
  received.assign(p, 0);
  received[rank] = blob.size();
  DETCOLL_RETURN_IF_ERROR(gather(comm, blobs.data(), &received));
  all->assign(p, {});
  for (int j = 0; j < p; ++j) {
    const char* at = blobs.data() + offsets_[j];
    const char* end = at + received[j];
    while (end - at >= static_cast<std::ptrdiff_t>(sizeof(uint64_t))) {
      uint64_t n = 0;
      std::memcpy(&n, at, sizeof n);
      at += sizeof n;
      if (n > static_cast<uint64_t>(end - at)) {
        return Status::internal("rank " + std::to_string(j) + " sent a malformed agreement text");
      }
      (*all)[j].emplace_back(at, n);
      at += n;
    }
  }
  return Status::ok();
}

Status agreeOnStatus(transport::Communicator& comm, const Status& local) {
  const auto code = static_cast<uint8_t>(local.code());
  Agreement agreement;
  DETCOLL_RETURN_IF_ERROR(agreement.exchangeRecords(comm, &code, 1, 1, 1));
  bool failed = false;
  for (int r = 0; r < comm.size(); ++r) failed = failed || agreement.record(r)[0] != 0;
  if (!failed) return Status::ok();
  std::vector<std::vector<std::string>> texts;
  DETCOLL_RETURN_IF_ERROR(agreement.exchangeTexts(comm, {local.message()}, &texts));
  std::vector<Status> statuses(comm.size());
  for (int r = 0; r < comm.size(); ++r) {
    const auto c = static_cast<StatusCode>(agreement.record(r)[0]);
    if (c != StatusCode::kSuccess) {
      statuses[r] = Status(c, texts[r].empty() ? std::string() : texts[r][0]);
    }
  }
  return verdict(statuses);
}

Status compareValues(const std::string& what, const std::vector<AgreedValue>& values,
                     const std::function<std::string(const AgreedValue&)>& describe) {
  const RankGroups groups = groupRanks(static_cast<int>(values.size()), [&](int a, int b) {
    const AgreedValue& x = values[a];
    const AgreedValue& y = values[b];
    return x.present == y.present &&
           (!x.present || (x.words[0] == y.words[0] && x.words[1] == y.words[1]));
  });
  if (groups.size() <= 1) return Status::ok();
  return Status::mismatch(
      what + " differs between ranks: " +
      describeGroups(
          groups, [&](int r) { return describe(values[r]); }, Phrase::kValueOnRanks));
}

}  // namespace detcoll::collective
