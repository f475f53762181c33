#include "collective/value_agreement.h"

namespace detcoll::collective {

std::string describeRanks(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

Status compareValues(const std::string& what, const std::vector<AgreedValue>& values,
                     const std::function<std::string(const AgreedValue&)>& describe) {
  auto same = [](const AgreedValue& a, const AgreedValue& b) {
    return a.present == b.present &&
           (!a.present || (a.words[0] == b.words[0] && a.words[1] == b.words[1]));
  };
  // Groups of ranks with equal values, in order of their first rank.
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < static_cast<int>(values.size()); ++r) {
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
  if (groups.size() <= 1) return Status::ok();
  std::string text = what + " differs between ranks: ";
  for (size_t g = 0; g < groups.size(); ++g) {
    text +=
        (g ? "; " : "") + describe(values[groups[g].front()]) + " on " + describeRanks(groups[g]);
  }
  return Status::mismatch(text);
}

}  // namespace detcoll::collective
