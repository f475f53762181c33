#pragma once

// Fuzz target: the response cache as the negotiation uses it (fusion/response_cache.h, the cache
// ids in fusion/negotiation.h's bit sets, the coordinator of fusion/coordinator.h). The input is a
// script for up to four ranks: requests enqueued on some rank (one of a few names, one of a few
// descriptions, some with a local error, some in groups), cycles, clock steps and shutdowns. Each
// rank is a model of the engine's side of a cycle (fusion/engine.cc): a request is announced once,
// as a cache bit when the rank's cache holds its name with its description, else in full; the
// messages are encoded and decoded on their way to the coordinator, and its response on its way
// back. Properties, for every script:
// - every message and response decodes, and encodes again to the same bytes;
// - every cache id of a response names a request that each rank has pending, with the cached
//   description, and every request answered in full is one the caches do not hold (the engine's
//   consistency check: ids mean the same on every rank);
// - no name is both ready and failed in one response, and failures carry a failure code;
// - the ranks' caches stay identical.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fusion/coordinator.h"
#include "fusion/negotiation.h"
#include "fusion/response_cache.h"
#include "tests/fuzz/fuzz_check.h"

namespace detcoll::fuzz {

// One of eight descriptions: two that differ only in count, other dtypes and kinds, and members
// of two groups (one announced with two sizes).
inline fusion::Descriptor scriptDescriptor(unsigned v) {
  fusion::Descriptor d;
  d.count = 10;
  switch (v & 7) {
    case 1:
      d.count = 11;
      break;
    case 2:
      d.type = DataType::kFloat64;
      d.op = ReduceOp::kAverage;
      d.mode = Mode::kInvariant;
      break;
    case 3:
      d.kind = fusion::RequestKind::kBroadcast;
      d.type = DataType::kInt64;
      d.root = 1;
      break;
    case 4:
      d.kind = fusion::RequestKind::kAllgather;
      d.type = DataType::kInt32;
      d.count = 3;
      break;
    case 5:
      d.groupKey = 7;
      d.groupSize = 2;
      break;
    case 6:
      d.groupKey = 7;
      d.groupSize = 3;
      break;
    case 7:
      d.groupKey = 9;
      d.groupSize = 2;
      d.count = 5;
      break;
    default:
      break;
  }
  return d;
}

struct RankModel {
  fusion::ResponseCache cache;
  std::map<std::string, fusion::Descriptor> pending;  // announced, not answered
  std::vector<fusion::RequestSpec> fresh;             // enqueued since the last cycle
  bool shutdown = false;
};

// One cycle of every rank and the coordinator; false once the engines stop.
inline bool scriptCycle(std::vector<RankModel>& ranks, fusion::Coordinator& coordinator,
                        fusion::Clock::time_point now) {
  const int p = static_cast<int>(ranks.size());
  std::vector<fusion::RankMessage> received(p);
  for (int r = 0; r < p; ++r) {
    RankModel& rank = ranks[r];
    fusion::RankMessage m;
    m.shutdown = rank.shutdown;
    for (const fusion::RequestSpec& spec : rank.fresh) {
      rank.pending.emplace(spec.name, spec.descriptor);
      const auto id =
          spec.localError.empty() ? rank.cache.find(spec.name, spec.descriptor) : std::nullopt;
      if (id) {
        m.cached.set(*id);
      } else {
        m.announced.push_back({spec.name, spec.descriptor, spec.localError});
      }
    }
    rank.fresh.clear();
    const std::vector<uint8_t> bytes = fusion::encode(m);
    DETCOLL_FUZZ_CHECK(fusion::decode(bytes.data(), bytes.size(), &received[r]).isOk());
    DETCOLL_FUZZ_CHECK(fusion::encode(received[r]) == bytes);
  }
  fusion::Response sent = coordinator.process(received, now);
  sent.fusionThresholdBytes = 1 << 20;
  const std::vector<uint8_t> bytes = fusion::encode(sent);
  fusion::Response response;
  DETCOLL_FUZZ_CHECK(fusion::decode(bytes.data(), bytes.size(), &response).isOk());
  DETCOLL_FUZZ_CHECK(fusion::encode(response) == bytes);
  if (response.shutdown) return false;

  std::set<std::string> failed;
  for (const fusion::ErrorEntry& e : response.errors) {
    DETCOLL_FUZZ_CHECK(!e.status.isOk());
    failed.insert(e.name);
  }
  const std::vector<uint32_t> ids = response.cachedReady.ids();
  for (RankModel& rank : ranks) {
    for (const fusion::ErrorEntry& e : response.errors) rank.pending.erase(e.name);
    std::set<std::string> ready;
    for (uint32_t id : ids) {
      DETCOLL_FUZZ_CHECK(rank.cache.contains(id));
      const std::string& name = rank.cache.name(id);
      const auto it = rank.pending.find(name);
      DETCOLL_FUZZ_CHECK(it != rank.pending.end());
      DETCOLL_FUZZ_CHECK(it->second == rank.cache.descriptor(id));
      DETCOLL_FUZZ_CHECK(ready.insert(name).second);
      rank.pending.erase(it);
    }
    for (const fusion::ReadyEntry& e : response.ready) {
      DETCOLL_FUZZ_CHECK(!rank.cache.find(e.name, e.descriptor));
      rank.cache.record(e.name, e.descriptor);
      const auto it = rank.pending.find(e.name);
      DETCOLL_FUZZ_CHECK(it != rank.pending.end());
      DETCOLL_FUZZ_CHECK(it->second == e.descriptor);
      DETCOLL_FUZZ_CHECK(ready.insert(e.name).second);
      rank.pending.erase(it);
    }
    for (const std::string& name : ready) DETCOLL_FUZZ_CHECK(failed.count(name) == 0);
  }
  for (const RankModel& rank : ranks) {
    DETCOLL_FUZZ_CHECK(rank.cache.size() == ranks[0].cache.size());
    for (uint32_t id = 0; id < rank.cache.size(); ++id) {
      DETCOLL_FUZZ_CHECK(rank.cache.name(id) == ranks[0].cache.name(id));
      DETCOLL_FUZZ_CHECK(rank.cache.descriptor(id) == ranks[0].cache.descriptor(id));
    }
  }
  return true;
}

// The script: a byte for the number of ranks, then two bytes per step. Step (a, b): a % 4 == 3
// runs a cycle after b * 100 ms (b == 255: rank a / 4 % p asks to shut down first); otherwise
// rank a / 4 % p enqueues name b % 8 with description b / 8 % 8, with a local error when a % 4
// == 2 (an engine refuses a name it has pending at once: those are left out).
inline int responseCacheTarget(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const int p = 1 + static_cast<int>(in.byte() % 4);
  fusion::CoordinatorOptions options;
  options.stallWarningSeconds = 1;
  options.stallShutdownSeconds = 3;
  std::vector<std::string> warnings;
  options.warn = [&](const std::string& w) { warnings.push_back(w); };
  fusion::Coordinator coordinator(p, options);
  std::vector<RankModel> ranks(p);
  fusion::Clock::time_point now{};
  while (in.remaining() > 0) {
    const unsigned a = in.byte();
    const unsigned b = in.byte();
    RankModel& rank = ranks[a / 4 % p];
    if (a % 4 == 3) {
      if (b == 255) rank.shutdown = true;
      now += std::chrono::milliseconds(100 * b);
      if (!scriptCycle(ranks, coordinator, now)) return 0;
      continue;
    }
    fusion::RequestSpec spec;
    spec.name = "tensor." + std::to_string(b % 8);
    spec.descriptor = scriptDescriptor(b / 8);
    if (a % 4 == 2) spec.localError = "sendbuf is null";
    bool queued = rank.pending.count(spec.name) > 0;
    for (const fusion::RequestSpec& f : rank.fresh) queued = queued || f.name == spec.name;
    if (!queued) rank.fresh.push_back(spec);
  }
  scriptCycle(ranks, coordinator, now);
  return 0;
}

}  // namespace detcoll::fuzz
