// kernels/rng/key.h and key_registry.h, and the C API of keys and fills: the key construction
// against a re-implementation of the one documented at the top of key.h, collisions and
// distinctness, the registry's purpose check, and the C functions against the C++ ones.

#include "kernels/rng/key.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bindings/c/detcoll.h"
#include "kernels/rng/distributions.h"
#include "kernels/rng/fill.h"
#include "kernels/rng/key_registry.h"
#include "kernels/rng/philox.h"

namespace detcoll::kernels::rng {
namespace {

// ---- The construction, written again from key.h ----

using Words = std::array<uint32_t, 4>;

// mix(h, m) = Philox4x32-10(counter = h, key = (m mod 2^32, m div 2^32)) XOR h
Words refMix(const Words& h, uint64_t m) {
  const Block b = philox4x32_10(h[0], h[1], h[2], h[3], static_cast<uint32_t>(m & 0xffffffffu),
                                static_cast<uint32_t>(m / 0x100000000ull));
  return {b.v[0] ^ h[0], b.v[1] ^ h[1], b.v[2] ^ h[2], b.v[3] ^ h[3]};
}
// mix over the message, then mix with `last`: the block count (nameHash: the byte length).
Words refAbsorb(Words h, const std::vector<uint64_t>& message, uint64_t last) {
  for (uint64_t m : message) h = refMix(h, m);
  return refMix(h, last);
}
Words refIv(const std::string& tag) {
  uint8_t bytes[16] = {};
  std::memcpy(bytes, tag.data(), std::min<size_t>(16, tag.size()));
  Words iv{};
  for (int k = 0; k < 4; ++k) {
    iv[k] = bytes[4 * k] | bytes[4 * k + 1] << 8 | bytes[4 * k + 2] << 16 |
            static_cast<uint32_t>(bytes[4 * k + 3]) << 24;
  }
  return iv;
}
Words refNameHash(const std::string& bytes) {
  std::vector<uint64_t> words((bytes.size() + 7) / 8, 0);
  for (size_t i = 0; i < bytes.size(); ++i) {
    words[i / 8] |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * (i % 8));
  }
  return refAbsorb(refIv("detcoll/name"), words, bytes.size());
}
Words refRootKey(uint64_t seed) {
  return refAbsorb(refIv("detcoll/root"), {seed}, 1);
}
uint64_t lo64(const Words& w) {
  return w[0] | static_cast<uint64_t>(w[1]) << 32;
}
uint64_t hi64(const Words& w) {
  return w[2] | static_cast<uint64_t>(w[3]) << 32;
}
Words refDerive(const Words& parent, const std::string& domain, const std::vector<uint64_t>& path) {
  const Words d = refNameHash(domain);
  std::vector<uint64_t> message = {lo64(d), hi64(d)};
  message.insert(message.end(), path.begin(), path.end());
  return refAbsorb(parent, message, message.size());
}

Words words(const Key& k) {
  return {k.w[0], k.w[1], k.w[2], k.w[3]};
}
Key key(const Words& w) {
  return Key{{w[0], w[1], w[2], w[3]}};
}
std::string text(const std::string& s) {  // printable, for failure messages
  std::string out;
  for (unsigned char c : s)
    out += (c >= 32 && c < 127) ? std::string(1, c) : "\\" + std::to_string(c);
  return out;
}

TEST(RngKeysTest, ConstructionMatchesTheDocumentation) {
  EXPECT_EQ(words(keyIv("detcoll/name")), refIv("detcoll/name"));
  EXPECT_EQ(words(keyIv("detcoll/root")), refIv("detcoll/root"));
  EXPECT_EQ(words(keyIv("0123456789abcdefXYZ")), refIv("0123456789abcdef")) << "16 bytes at most";
  std::mt19937_64 random(0xd0a1);
  const size_t lengths[] = {0, 1, 7, 8, 9, 15, 16, 17, 24, 33, 100};
  for (int trial = 0; trial < 400; ++trial) {
    const Words parent = {static_cast<uint32_t>(random()), static_cast<uint32_t>(random()),
                          static_cast<uint32_t>(random()), static_cast<uint32_t>(random())};
    std::string domain(trial < 44 ? lengths[trial % 11] : random() % 40, '\0');
    for (char& c : domain) c = static_cast<char>(trial % 3 ? random() : 'a' + random() % 26);
    std::vector<uint64_t> path(random() % 7);
    for (uint64_t& p : path) p = random() >> (random() % 64);
    const uint64_t m = random();
    ASSERT_EQ(words(keyMix(key(parent), m)), refMix(parent, m));
    ASSERT_EQ(words(nameHash(domain.data(), domain.size())), refNameHash(domain)) << text(domain);
    ASSERT_EQ(words(rootKey(m)), refRootKey(m)) << m;
    const Words expected = refDerive(parent, domain, path);
    ASSERT_EQ(words(deriveKey(key(parent), domain, path.data(), path.size())), expected)
        << "domain '" << text(domain) << "', " << path.size() << " path entries";
    const Key hash = nameHash(domain.data(), domain.size());
    ASSERT_EQ(words(deriveKey(key(parent), hash, path.data(), path.size())), expected);
  }
}

// 10^6 keys (root -> "sample" [step, index] for 1000 x 1000) and 3000 more from other domains
// and paths: every 128-bit key distinct, and so is the first block of every stream.
TEST(RngKeysTest, NoCollisionsAmongAMillionDerivedKeys) {
  const Key root = rootKey(0x5eed);
  const Key sample = nameHash("sample", 6);
  std::vector<std::pair<uint64_t, uint64_t>> keys, blocks;
  auto add = [&](const Key& k) {
    keys.emplace_back(keyLow64(k), keyHigh64(k));
    const Block b = streamBlock(k, 0);
    blocks.emplace_back(b.v[0] | static_cast<uint64_t>(b.v[1]) << 32,
                        b.v[2] | static_cast<uint64_t>(b.v[3]) << 32);
  };
  for (uint64_t step = 0; step < 1000; ++step) {
    for (uint64_t index = 0; index < 1000; ++index) {
      const uint64_t path[2] = {step, index};
      add(deriveKey(root, sample, path, 2));
    }
    add(deriveKey(root, "dropout", &step, 1));
    add(deriveKey(root, "sample", &step, 1));
    add(deriveKey(root, "s" + std::to_string(step), nullptr, 0));
  }
  add(root);
  for (auto* list : {&keys, &blocks}) {
    std::sort(list->begin(), list->end());
    EXPECT_EQ(std::adjacent_find(list->begin(), list->end()), list->end())
        << (list == &keys ? "two keys" : "two first blocks") << " collide";
  }
}

TEST(RngKeysTest, PathsDomainsAndParentsAreAllDistinct) {
  const Key root = rootKey(7);
  const std::vector<std::vector<uint64_t>> paths = {{}, {0}, {1, 2}, {1, 2, 0}, {12}, {2, 1}, {1}};
  const std::string domains[] = {
      "", "a", std::string("a\0", 2), "b", "ab", std::string(8, '\0'), std::string(9, '\0')};
  std::vector<std::pair<uint64_t, uint64_t>> all = {{keyLow64(root), keyHigh64(root)}};
  for (const Key& parent : {root, rootKey(8)}) {
    for (const std::string& d : domains) {
      for (const auto& p : paths) {
        const Key child = deriveKey(parent, d, p.data(), p.size());
        EXPECT_NE(child, parent);
        all.emplace_back(keyLow64(child), keyHigh64(child));
      }
    }
  }
  for (const std::string& d : domains) {
    const Key h = nameHash(d.data(), d.size());
    all.emplace_back(keyLow64(h), keyHigh64(h));
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.size(), 2 * 7 * 7 + 7 + 1u);

  std::vector<std::pair<uint64_t, uint64_t>> roots;
  std::mt19937_64 random(11);
  for (uint64_t s = 0; s < 100000; ++s) {
    const Key k = rootKey(s < 50000 ? s : random());
    roots.emplace_back(keyLow64(k), keyHigh64(k));
  }
  std::sort(roots.begin(), roots.end());
  EXPECT_EQ(std::adjacent_find(roots.begin(), roots.end()), roots.end()) << "two seeds, one root";
}

// ---- KeyRegistry ----

size_t occurrences(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1))
    ++n;
  return n;
}

TEST(RngKeysTest, RegistryRejectsASecondPurposeForOneKey) {
  KeyRegistry registry;
  registry.beginStep(41);
  const Key root = rootKey(3);
  const uint64_t path[2] = {3, 17};
  Key first{}, again{}, other{{9, 9, 9, 9}};
  ASSERT_TRUE(registry.derive(root, "dropout", path, 2, "layer3.dropout", &first).isOk());
  EXPECT_EQ(first, deriveKey(root, "dropout", path, 2));
  ASSERT_TRUE(registry.derive(root, "dropout", path, 2, "layer3.dropout", &again).isOk());
  EXPECT_EQ(again, first);
  EXPECT_EQ(registry.size(), 1u);
  const Status clash = registry.derive(root, "dropout", path, 2, "layer4.dropout", &other);
  EXPECT_EQ(clash.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(other, (Key{{9, 9, 9, 9}})) << "a rejected derivation wrote the key";
  for (const char* needle : {"'layer3.dropout'", "'layer4.dropout'", "step 41"}) {
    EXPECT_NE(clash.message().find(needle), std::string::npos) << needle << ": " << clash.message();
  }
  EXPECT_EQ(occurrences(clash.message(), "domain 'dropout', path [3, 17]"), 2u) << clash.message();
  // The first claim stands: its purpose may derive again, the other still may not.
  EXPECT_TRUE(registry.derive(root, "dropout", path, 2, "layer3.dropout", &again).isOk());
  EXPECT_FALSE(registry.derive(root, "dropout", path, 2, "layer4.dropout", &other).isOk());
  // Other paths are other keys.
  const uint64_t path2[2] = {3, 18};
  EXPECT_TRUE(registry.derive(root, "dropout", path2, 2, "layer4.dropout", &other).isOk());
  EXPECT_EQ(registry.size(), 2u);
  registry.beginStep(42);
  EXPECT_EQ(registry.step(), 42u);
  EXPECT_EQ(registry.size(), 0u);
  EXPECT_TRUE(registry.derive(root, "dropout", path, 2, "layer4.dropout", &other).isOk());
  EXPECT_EQ(other, first);
  const Status null = registry.derive(root, "dropout", nullptr, 1, "x", &other);
  EXPECT_EQ(null.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(null.message().find("path is null"), std::string::npos) << null.message();
}

TEST(RngKeysTest, RegistryIsThreadSafe) {
  KeyRegistry registry;
  const Key root = rootKey(5);
  constexpr int kThreads = 6, kKeys = 2000;
  std::atomic<int> failures{0}, winners{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t j = 0; j < kKeys; ++j) {
        const uint64_t path[2] = {static_cast<uint64_t>(t), j};
        Key k;
        if (!registry.derive(root, "worker", path, 2, "thread " + std::to_string(t), &k).isOk() ||
            k != deriveKey(root, "worker", path, 2)) {
          ++failures;
        }
      }
      Key shared;  // every thread claims one key for its own purpose: exactly one wins
      if (registry.derive(root, "shared", nullptr, 0, "thread " + std::to_string(t), &shared)
              .isOk())
        ++winners;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(winners.load(), 1);
  EXPECT_EQ(registry.size(), static_cast<size_t>(kThreads * kKeys + 1));
}

// ---- The C API ----

detcoll_rng_key_t cKey(const Key& k) {
  return detcoll_rng_key_t{{k.w[0], k.w[1], k.w[2], k.w[3]}};
}
Key fromC(const detcoll_rng_key_t& k) {
  return Key{{k.words[0], k.words[1], k.words[2], k.words[3]}};
}
void expectInvalid(detcoll_status_t status, const std::string& call, const std::string& what) {
  const std::string error = detcoll_last_error();
  EXPECT_EQ(status, DETCOLL_ERR_INVALID_ARGUMENT) << call << " " << what;
  EXPECT_NE(error.find(call), std::string::npos) << error;
  EXPECT_NE(error.find(what), std::string::npos) << error;
}

TEST(RngKeysTest, CApiKeysEqualTheCppFunctions) {
  detcoll_rng_key_t root, child, hash;
  ASSERT_EQ(detcoll_rng_key_from_seed(0xfeedbeef12ull, &root), DETCOLL_SUCCESS);
  EXPECT_EQ(fromC(root), rootKey(0xfeedbeef12ull));
  const uint64_t path[3] = {7, 0xffffffffffffull, 0};
  ASSERT_EQ(detcoll_rng_derive(&root, "dropout", path, 3, &child), DETCOLL_SUCCESS);
  EXPECT_EQ(fromC(child), deriveKey(fromC(root), "dropout", path, 3));
  ASSERT_EQ(detcoll_rng_derive(&root, "", nullptr, 0, &child), DETCOLL_SUCCESS);
  EXPECT_EQ(fromC(child), deriveKey(fromC(root), "", nullptr, 0));
  const char bytes[] = "ab\0\xff\x80z";
  ASSERT_EQ(detcoll_rng_name_hash(bytes, 6, &hash), DETCOLL_SUCCESS);
  EXPECT_EQ(fromC(hash), nameHash(bytes, 6));
  ASSERT_EQ(detcoll_rng_name_hash(nullptr, 0, &hash), DETCOLL_SUCCESS);
  EXPECT_EQ(fromC(hash), nameHash("", 0));

  ASSERT_EQ(detcoll_rng_begin_step(9), DETCOLL_SUCCESS);
  detcoll_rng_key_t checked, untouched{{1, 2, 3, 4}};
  ASSERT_EQ(detcoll_rng_derive_checked(&root, "dropout", path, 3, "layer1", &checked),
            DETCOLL_SUCCESS);
  EXPECT_EQ(fromC(checked), deriveKey(fromC(root), "dropout", path, 3));
  EXPECT_EQ(detcoll_rng_derive_checked(&root, "dropout", path, 3, "layer1", &checked),
            DETCOLL_SUCCESS);
  expectInvalid(detcoll_rng_derive_checked(&root, "dropout", path, 3, "layer2", &untouched),
                "random key collision", "'layer2'");
  EXPECT_NE(std::string(detcoll_last_error()).find("'layer1'"), std::string::npos);
  EXPECT_EQ(fromC(untouched), (Key{{1, 2, 3, 4}}));
  ASSERT_EQ(detcoll_rng_begin_step(10), DETCOLL_SUCCESS);
  EXPECT_EQ(detcoll_rng_derive_checked(&root, "dropout", path, 3, "layer2", &untouched),
            DETCOLL_SUCCESS);
}

TEST(RngKeysTest, CApiKeyFunctionsNameTheirNullArgument) {
  detcoll_rng_key_t k{{1, 2, 3, 4}};
  const uint64_t path[1] = {1};
  expectInvalid(detcoll_rng_key_from_seed(1, nullptr), "detcoll_rng_key_from_seed", "key");
  const char* d = "detcoll_rng_derive";
  expectInvalid(detcoll_rng_derive(nullptr, "x", path, 1, &k), d, "parent");
  expectInvalid(detcoll_rng_derive(&k, nullptr, path, 1, &k), d, "domain");
  expectInvalid(detcoll_rng_derive(&k, "x", nullptr, 1, &k), d, "path");
  expectInvalid(detcoll_rng_derive(&k, "x", path, 1, nullptr), d, "child");
  const char* c = "detcoll_rng_derive_checked";
  expectInvalid(detcoll_rng_derive_checked(nullptr, "x", path, 1, "p", &k), c, "parent");
  expectInvalid(detcoll_rng_derive_checked(&k, nullptr, path, 1, "p", &k), c, "domain");
  expectInvalid(detcoll_rng_derive_checked(&k, "x", nullptr, 1, "p", &k), c, "path");
  expectInvalid(detcoll_rng_derive_checked(&k, "x", path, 1, nullptr, &k), c, "purpose");
  expectInvalid(detcoll_rng_derive_checked(&k, "x", path, 1, "p", nullptr), c, "child");
  expectInvalid(detcoll_rng_name_hash(nullptr, 3, &k), "detcoll_rng_name_hash", "bytes");
  expectInvalid(detcoll_rng_name_hash("abc", 3, nullptr), "detcoll_rng_name_hash", "hash");
  EXPECT_EQ(fromC(k), (Key{{1, 2, 3, 4}})) << "a failed call wrote its output";
}

TEST(RngKeysTest, CApiFillsEqualFillHost) {
  const detcoll_rng_key_t k = cKey(rootKey(77));
  const uint64_t offset = 1001;
  const size_t count = 777;
  auto check = [&](detcoll_status_t status, FillSpec spec, const std::vector<uint8_t>& got) {
    ASSERT_EQ(status, DETCOLL_SUCCESS) << detcoll_last_error();
    std::vector<uint8_t> expected(got.size());
    ASSERT_TRUE(fillHost(fromC(k), spec, offset, count, expected.data()).isOk());
    EXPECT_TRUE(got == expected) << distributionName(spec.distribution) << " "
                                 << dataTypeName(spec.type);
  };
  for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
    const auto dtype = static_cast<detcoll_dtype_t>(t);
    std::vector<uint8_t> out(count * dataTypeSize(t));
    FillSpec spec;
    spec.type = t;
    check(detcoll_rng_uniform(&k, offset, out.data(), count, dtype), spec, out);
    spec.distribution = Distribution::kNormal;
    spec.mean = -2.5;
    spec.stddev = 0.125;
    check(detcoll_rng_normal(&k, offset, out.data(), count, dtype, -2.5, 0.125), spec, out);
  }
  for (DataType t : {DataType::kFloat16, DataType::kInt32, DataType::kInt64}) {
    std::vector<uint8_t> out(count * dataTypeSize(t));
    FillSpec spec;
    spec.type = t;
    spec.distribution = Distribution::kBernoulli;
    spec.p = 0.61;
    check(
        detcoll_rng_bernoulli(&k, offset, out.data(), count, static_cast<detcoll_dtype_t>(t), 0.61),
        spec, out);
    if (t == DataType::kFloat16) continue;
    spec.distribution = Distribution::kRandint;
    spec.n = 12345;
    check(
        detcoll_rng_randint(&k, offset, out.data(), count, static_cast<detcoll_dtype_t>(t), 12345),
        spec, out);
  }
}

TEST(RngKeysTest, CApiFillsRejectBadArgumentsNamingTheCall) {
  const detcoll_rng_key_t k = cKey(rootKey(78));
  std::vector<uint8_t> out(64, 0xa5);
  void* o = out.data();
  expectInvalid(detcoll_rng_uniform(&k, 0, o, 4, DETCOLL_INT32), "detcoll_rng_uniform", "int32");
  expectInvalid(detcoll_rng_uniform(nullptr, 0, o, 4, DETCOLL_FLOAT32), "detcoll_rng_uniform",
                "key");
  expectInvalid(detcoll_rng_uniform(&k, 0, nullptr, 4, DETCOLL_FLOAT32), "detcoll_rng_uniform",
                "out is null");
  expectInvalid(detcoll_rng_uniform(&k, UINT64_MAX - 2, o, 4, DETCOLL_FLOAT32),
                "detcoll_rng_uniform", "2^64");
  expectInvalid(detcoll_rng_normal(&k, 0, o, 4, DETCOLL_FLOAT16, 0, 1), "detcoll_rng_normal",
                "float16");
  expectInvalid(detcoll_rng_normal(&k, 0, o, 4, DETCOLL_FLOAT32, 0, -1), "detcoll_rng_normal",
                "stddev");
  expectInvalid(detcoll_rng_bernoulli(&k, 0, o, 4, DETCOLL_INT32, 1.5), "detcoll_rng_bernoulli",
                "probability");
  expectInvalid(detcoll_rng_bernoulli(&k, 0, o, 4, static_cast<detcoll_dtype_t>(6), 0.5),
                "detcoll_rng_bernoulli", "dtype 6");
  expectInvalid(detcoll_rng_randint(&k, 0, o, 4, DETCOLL_FLOAT64, 5), "detcoll_rng_randint",
                "float64");
  expectInvalid(detcoll_rng_randint(&k, 0, o, 4, DETCOLL_INT32, 0), "detcoll_rng_randint", "n = 0");
  expectInvalid(detcoll_rng_randint(&k, 0, o, 4, DETCOLL_INT32, (1ull << 31) + 1),
                "detcoll_rng_randint", "2147483648]");
  expectInvalid(detcoll_rng_randint(&k, 1ull << 48, o, 1, DETCOLL_INT64, 5), "detcoll_rng_randint",
                "2^48");
  for (uint8_t b : out) ASSERT_EQ(b, 0xa5) << "a rejected fill wrote its output";
}

// The state functions need detcoll_init (which the unit tests never call); the missing init is what
// they report, naming the call, and they write nothing.
TEST(RngKeysTest, CApiStateNeedsInit) {
  uint64_t value = 99;
  size_t needed = 99;
  detcoll_rng_key_t k{{1, 2, 3, 4}};
  char buf[64] = {};
  const std::pair<const char*, std::function<detcoll_status_t()>> calls[] = {
      {"detcoll_rng_seed", [&] { return detcoll_rng_seed(5); }},
      {"detcoll_rng_get_seed", [&] { return detcoll_rng_get_seed(&value); }},
      {"detcoll_rng_root_key", [&] { return detcoll_rng_root_key(&k); }},
      {"detcoll_rng_counter_get", [&] { return detcoll_rng_counter_get("step", &value); }},
      {"detcoll_rng_counter_set", [&] { return detcoll_rng_counter_set("step", 3); }},
      {"detcoll_rng_counter_next", [&] { return detcoll_rng_counter_next("step", &value); }},
      {"detcoll_rng_state_save", [&] { return detcoll_rng_state_save(buf, sizeof buf, &needed); }},
      {"detcoll_rng_state_restore", [&] { return detcoll_rng_state_restore(buf, sizeof buf); }},
  };
  for (const auto& [call, body] : calls) {
    EXPECT_EQ(body(), DETCOLL_ERR_NOT_INITIALIZED) << call;
    EXPECT_NE(std::string(detcoll_last_error()).find(call), std::string::npos)
        << call << ": " << detcoll_last_error();
  }
  EXPECT_EQ(value, 99u);
  EXPECT_EQ(needed, 99u);
  EXPECT_EQ(fromC(k), (Key{{1, 2, 3, 4}}));
  for (char c : buf) ASSERT_EQ(c, 0);
}

}  // namespace
}  // namespace detcoll::kernels::rng
