#include "collective/value_agreement.h"

#include <cstring>

namespace detcoll::collective {
namespace {

// One rank's contribution: value, status code and the start of its message.
struct Record {
  uint64_t words[2];
  int32_t present;
  int32_t code;
  char message[240];
};

}  // namespace

std::string describeRanks(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

Status agreeOnValue(Communicator& comm, const std::string& what, const Status& local,
                    const AgreedValue& mine,
                    const std::function<std::string(const AgreedValue&)>& describe,
                    std::vector<AgreedValue>* all) {
  Record record{};
  record.words[0] = mine.words[0];
  record.words[1] = mine.words[1];
  record.present = mine.present ? 1 : 0;
  record.code = static_cast<int32_t>(local.code());
  std::strncpy(record.message, local.message().c_str(), sizeof record.message - 1);
  std::vector<Record> records(comm.size());
  DETCOLL_RETURN_IF_ERROR(comm.allgather(&record, records.data(), sizeof record));

  for (int r = 0; r < comm.size(); ++r) {
    if (records[r].code != 0) {
      return Status(static_cast<StatusCode>(records[r].code),
                    "rank " + std::to_string(r) + ": " + records[r].message);
    }
  }
  std::vector<AgreedValue> values(comm.size());
  for (int r = 0; r < comm.size(); ++r) {
    values[r].present = records[r].present != 0;
    values[r].words[0] = records[r].words[0];
    values[r].words[1] = records[r].words[1];
  }
  auto same = [](const AgreedValue& a, const AgreedValue& b) {
    return a.present == b.present &&
           (!a.present || (a.words[0] == b.words[0] && a.words[1] == b.words[1]));
  };
  // Groups of ranks with equal values, in order of their first rank.
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < comm.size(); ++r) {
    bool placed = false;
    for (auto& group : groups) {
      if (same(values[group.front()], values[r])) {
        group.push_back(r);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({r});
  }
  if (groups.size() > 1) {
    std::string text = what + " differs between ranks: ";
    for (size_t g = 0; g < groups.size(); ++g) {
      text +=
          (g ? "; " : "") + describe(values[groups[g].front()]) + " on " + describeRanks(groups[g]);
    }
    return Status::mismatch(text);
  }
  if (all != nullptr) *all = std::move(values);
  return Status::ok();
}

}  // namespace detcoll::collective
