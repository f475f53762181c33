#include "collective/agreement.h"

#include <algorithm>
#include <cstring>

#include "collective/tags.h"

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

Status Agreement::exchange(transport::Communicator& comm, char* slots, const size_t* bytes,
                           size_t capacity, std::vector<size_t>* received) {
  const int p = comm.size();
  const int rank = comm.rank();
  transfers_.clear();
  for (int j = 0; j < p; ++j) {
    if (j != rank)
      transfers_.push_back(comm.irecv(slots + j * capacity, bytes[j], j, kTagAgreement));
  }
  for (int j = 0; j < p; ++j) {
    if (j != rank) {
      transfers_.push_back(comm.isend(slots + rank * capacity, bytes[rank], j, kTagAgreement));
    }
  }
  // The receives one by one, for their sizes; every transfer waited for, even after a failure.
  received->assign(p, bytes[rank]);
  Status status;
  for (int j = 0, t = 0; j < p; ++j) {
    if (j == rank) continue;
    const Status s = transfers_[t++]->wait(&(*received)[j]);
    if (status.isOk()) status = s;
  }
  const Status sent = transport::waitAll(transfers_.data() + (p - 1), p - 1);
  transfers_.clear();
  return status.isOk() ? sent : status;
}

Status Agreement::exchangeRecords(transport::Communicator& comm, const void* record, size_t bytes,
                                  size_t capacity, size_t minimum) {
  const int p = comm.size();
  const int rank = comm.rank();
  if (bytes > capacity) return Status::internal("an agreement record exceeds its capacity");
  capacity_ = capacity;
  if (records_.size() < p * capacity) records_.resize(p * capacity);
  char* own = records_.data() + rank * capacity;
  if (bytes > 0 && own != record) std::memcpy(own, record, bytes);
  // Receives take up to `capacity`; this rank sends its `bytes`.
  std::vector<size_t> sizes(p, capacity);
  sizes[rank] = bytes;
  std::vector<size_t> received;
  DETCOLL_RETURN_IF_ERROR(exchange(comm, records_.data(), sizes.data(), capacity, &received));
  // A record shorter than any of this agreement's is another agreement's: ranks out of step.
  for (int j = 0; j < p; ++j) {
    if (received[j] < minimum) {
      return Status::mismatch("rank " + std::to_string(j) + " sent a record of " +
                              std::to_string(received[j]) + " bytes where this agreement's " +
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
  // First every blob's size, then the blobs, each in a slot as large as the largest.
  std::vector<uint64_t> sizes(p, 0);
  sizes[rank] = blob.size();
  std::vector<size_t> eight(p, sizeof(uint64_t));
  std::vector<size_t> received;
  DETCOLL_RETURN_IF_ERROR(exchange(comm, reinterpret_cast<char*>(sizes.data()), eight.data(),
                                   sizeof(uint64_t), &received));
  const size_t slot = std::max<size_t>(1, *std::max_element(sizes.begin(), sizes.end()));
  std::vector<char> blobs(p * slot);
  if (!blob.empty()) std::memcpy(blobs.data() + rank * slot, blob.data(), blob.size());
  const std::vector<size_t> exact(sizes.begin(), sizes.end());
  DETCOLL_RETURN_IF_ERROR(exchange(comm, blobs.data(), exact.data(), slot, &received));
  all->assign(p, {});
  for (int j = 0; j < p; ++j) {
    const char* at = blobs.data() + j * slot;
    const char* end = at + sizes[j];
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
