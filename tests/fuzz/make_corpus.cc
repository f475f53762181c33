// Writes the seed corpora of the fuzz targets (targets.h): a handful of small valid inputs each,
// made by the library's own encoders where it has them.
//
//   build-fuzz/make_corpus tests/fuzz/corpus
//
// Files are named seed-*; crash-* files beside them are inputs that once failed, kept as
// regression tests (replayed by tests/unit/fuzz_corpus_test.cc).

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/fuzz/targets.h"

namespace {

using Bytes = std::vector<uint8_t>;

std::string g_root;
int g_written = 0;

void write(const std::string& target, const std::string& name, const Bytes& bytes) {
  const std::string path = g_root + "/" + target + "/seed-" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::fclose(f);
  ++g_written;
  // Every seed passes its own target.
  for (const detcoll::fuzz::Target& t : detcoll::fuzz::kTargets) {
    if (t.name == target) t.run(bytes.data(), bytes.size());
  }
}

// ---- negotiation

detcoll::fusion::Descriptor descriptor(detcoll::fusion::RequestKind kind, detcoll::DataType type,
                                       uint64_t count) {
  detcoll::fusion::Descriptor d;
  d.kind = kind;
  d.type = type;
  d.count = count;
  return d;
}

void negotiation() {
  using namespace detcoll::fusion;
  RankMessage m;
  write("negotiation", "rank-message-empty", encode(m));
  m.cached.set(0);
  m.cached.set(3);
  m.cached.set(64);
  m.announced.push_back({"layer1.weight",
                         descriptor(RequestKind::kAllreduce, detcoll::DataType::kFloat32, 1000),
                         ""});
  Descriptor b = descriptor(RequestKind::kBroadcast, detcoll::DataType::kInt64, 8);
  b.root = 1;
  m.announced.push_back({"params", b, "root 5 is not a rank"});
  write("negotiation", "rank-message-announced", encode(m));
  RankMessage stop;
  stop.shutdown = true;
  write("negotiation", "rank-message-shutdown", encode(stop));

  Response r;
  r.fusionThresholdBytes = 64 << 20;
  write("negotiation", "response-empty", encode(r));
  r.cachedReady.set(1);
  r.cachedReady.set(2);
  Descriptor g = descriptor(RequestKind::kAllreduce, detcoll::DataType::kBFloat16, 17);
  g.groupKey = 99;
  g.groupSize = 2;
  r.ready.push_back({"a", g});
  r.ready.push_back({"b", descriptor(RequestKind::kAllgather, detcoll::DataType::kInt32, 3)});
  r.errors.push_back({"c", detcoll::Status::mismatch("ranks disagree")});
  r.errors.push_back({"d", detcoll::Status::invalidArgument("rank 1: sendbuf is null")});
  r.partial = true;
  write("negotiation", "response-full", encode(r));
  Response down;
  down.shutdown = true;
  down.shutdownReason = "rank 2 shut detcoll down";
  write("negotiation", "response-shutdown", encode(down));
}

// ---- response cache: scripts (see responseCacheTarget)

struct Script {
  Bytes bytes;
  explicit Script(int ranks) { bytes.push_back(static_cast<uint8_t>(ranks - 1)); }
  Script& enqueue(int rank, int name, int description, bool error = false) {
    bytes.push_back(static_cast<uint8_t>(4 * rank + (error ? 2 : 0)));
    bytes.push_back(static_cast<uint8_t>(name + 8 * description));
    return *this;
  }
  Script& cycle(int tenths = 1, int rank = 0) {
    bytes.push_back(static_cast<uint8_t>(4 * rank + 3));
    bytes.push_back(static_cast<uint8_t>(tenths));
    return *this;
  }
};

void responseCache() {
  Script steady(3);
  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < 3; ++r) steady.enqueue(r, 0, 0).enqueue(r, 1, 2).enqueue(r, 2, 3);
    steady.cycle();
  }
  write("response_cache", "steady-state", steady.bytes);
  Script mismatch(3);
  mismatch.enqueue(0, 0, 0).enqueue(1, 0, 1).enqueue(2, 0, 0).cycle();
  write("response_cache", "mismatch", mismatch.bytes);
  Script groups(2);
  groups.enqueue(0, 2, 5).enqueue(0, 3, 5).enqueue(1, 3, 5).cycle().enqueue(1, 2, 5).cycle();
  groups.enqueue(0, 4, 6).enqueue(1, 4, 5).enqueue(0, 5, 7).enqueue(1, 5, 7).cycle();
  write("response_cache", "groups", groups.bytes);
  Script stall(2);
  stall.enqueue(0, 6, 4).cycle().cycle(15).cycle(15).cycle(15);
  write("response_cache", "stall", stall.bytes);
  Script invalid(4);
  for (int r = 0; r < 4; ++r) invalid.enqueue(r, 7, 0, r == 2);
  invalid.cycle();
  for (int r = 0; r < 4; ++r) invalid.enqueue(r, 7, 0);
  invalid.cycle();
  write("response_cache", "local-error", invalid.bytes);
  Script shutdown(2);
  shutdown.enqueue(0, 1, 1).cycle().cycle(255, 1);
  write("response_cache", "shutdown", shutdown.bytes);
}

// ---- call agreement: records in the header's layout (collective/call_agreement.cc, WireHeader)

struct Header {
  uint16_t magic = 0xDC01;
  uint8_t kind = 2;  // allreduce
  uint8_t status = 0;
  uint8_t mode = 1;  // ordered
  uint8_t dtype = 0;
  uint8_t op = 0;
  uint8_t device = 0;
  int32_t root = 0;
  uint16_t payloadBytes = 0;
  uint16_t leaves = 1;
  uint64_t count = 4;
  uint64_t nameHash = 0x9e3779b97f4a7c15ull;
};
static_assert(sizeof(Header) == detcoll::collective::CallAgreement::kHeaderBytes);

Bytes records(const std::vector<Header>& headers, const std::vector<std::string>& texts,
              bool agree) {
  Bytes bytes{static_cast<uint8_t>(headers.size() - 1)};
  std::vector<std::vector<char>> slots;
  for (const Header& h : headers) {
    uint8_t record[32 + 32] = {};
    std::memcpy(record, &h, sizeof h);
    for (int i = 0; i < h.payloadBytes && i < 32; ++i) record[32 + i] = static_cast<uint8_t>(i + 1);
    bytes.insert(bytes.end(), record, record + sizeof record);
    slots.emplace_back(detcoll::collective::CallAgreement::kRecordBytes, 0);
    std::memcpy(slots.back().data(), record, sizeof record);
  }
  for (const std::string& t : texts) {
    bytes.insert(bytes.end(), t.begin(), t.end());
    bytes.push_back(0);
  }
  std::vector<const char*> pointers;
  for (const auto& s : slots) pointers.push_back(s.data());
  if (detcoll::collective::callRecordsAgree(pointers) != agree) {
    std::fprintf(stderr, "make_corpus: call agreement seed does not %s\n",
                 agree ? "agree" : "disagree");
    std::exit(1);
  }
  return bytes;
}

void callAgreement() {
  Header h;
  h.payloadBytes = 16;  // 4 float32 inline
  write("call_agreement", "agree-inline", records({h, h, h}, {}, true));
  Header big = h;
  big.payloadBytes = 0;
  big.count = 1 << 20;
  big.leaves = 3;
  write("call_agreement", "agree-leaves", records({big, big}, {}, true));
  Header failed = h;
  failed.status = 1;  // invalid argument
  failed.payloadBytes = 0;
  write("call_agreement", "local-failure",
        records({h, failed}, {"w", "", "w", "recvbuf is null"}, false));
  Header other = h;
  other.count = 5;
  write("call_agreement", "count-differs",
        records({h, other, h}, {"w", "", "w", "", "w", ""}, false));
  Header broadcast = h;
  broadcast.kind = 3;
  broadcast.payloadBytes = 0;
  write("call_agreement", "kind-differs", records({h, broadcast}, {"w", "", "w", ""}, false));
  Header renamed = h;
  renamed.nameHash = 1;
  write("call_agreement", "name-differs",
        records({h, h, renamed, h}, {"w", "", "w", "", "v", "", "w", ""}, false));
  Header value = h;
  value.kind = 5;
  value.payloadBytes = 24;
  value.count = 0;
  write("call_agreement", "value", records({value}, {}, true));
}

// ---- seed state

void seedState() {
  using detcoll::kernels::rng::SeedState;
  auto save = [](const SeedState& s, bool fixCheck) {
    const std::string bytes = s.serialize();
    Bytes out{static_cast<uint8_t>(fixCheck ? 1 : 0)};
    out.insert(out.end(), bytes.begin(), bytes.end());
    return out;
  };
  SeedState empty(42);
  write("seed_state", "empty", save(empty, false));
  SeedState steps(20261121);
  (void)steps.setCounter("epoch", 2);
  (void)steps.setCounter("step", 5);
  write("seed_state", "counters", save(steps, false));
  write("seed_state", "counters-check-fixed", save(steps, true));
  SeedState many(~0ull);
  for (int i = 0; i < 12; ++i) (void)many.setCounter("layer" + std::to_string(i), i * 1000003ull);
  (void)many.setCounter(std::string(100, 'n'), ~0ull);
  write("seed_state", "many-counters", save(many, true));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (with a folder per target)\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  negotiation();
  responseCache();
  callAgreement();
  seedState();
  std::printf("make_corpus: wrote %d seeds under %s\n", g_written, g_root.c_str());
  return 0;
}
