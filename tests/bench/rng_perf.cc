// The random-fill benchmark: detcoll's counter-based fills beside the standard library's
// sequential generators (std::mt19937 / std::mt19937_64 with the <random> distributions), on the
// same buffer, one core each, interleaved in one run. Prints ns per element, the ratio
// (peer time / detcoll time: above 1 means detcoll is faster) and #wrong: elements of detcoll's
// last fill that differ from the per-element formula of kernels/rng/distributions.h.
//   detcoll_rng_perf [-n ELEMENTS] [-r REPEATS] [-t TRIALS]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/rng/distributions.h"
#include "kernels/rng/fill.h"

namespace rng = detcoll::kernels::rng;
using detcoll::DataType;

namespace {

double secondsOf(const std::function<void(int)>& body, int repeats) {
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) body(r);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Row {
  std::string name, peer;
  rng::FillSpec spec;
  int threads;
  std::function<void(void*, size_t)> peerFill;
  std::function<bool(const void*, uint64_t, size_t)> check;  // element j of a fill at `offset`
};

}  // namespace

int main(int argc, char** argv) {
  size_t n = size_t{1} << 21;
  int repeats = 8, trials = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "-n")) n = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "-r")) repeats = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "-t")) trials = std::atoi(argv[i + 1]);
  }
  const rng::Key key = rng::rootKey(0x243f6a8885a308d3ull);
  std::mt19937 mt(12345);
  std::mt19937_64 mt64(12345);

  auto spec = [](rng::Distribution d, DataType t) {
    rng::FillSpec s;
    s.distribution = d;
    s.type = t;
    s.p = 0.1;
    s.n = 1000;
    return s;
  };
  std::vector<Row> rows;
  rows.push_back({"uniform float32", "mt19937+uniform_real<float>",
                  spec(rng::Distribution::kUniform, DataType::kFloat32), 1,
                  [&](void* out, size_t count) {
                    std::uniform_real_distribution<float> d(0.0f, 1.0f);
                    auto* o = static_cast<float*>(out);
                    for (size_t i = 0; i < count; ++i) o[i] = d(mt);
                  },
                  [&](const void* out, uint64_t i, size_t j) {
                    return static_cast<const float*>(out)[j] == rng::uniformFloat32(key, i);
                  }});
  rows.push_back({"uniform float64", "mt19937_64+uniform_real<double>",
                  spec(rng::Distribution::kUniform, DataType::kFloat64), 1,
                  [&](void* out, size_t count) {
                    std::uniform_real_distribution<double> d(0.0, 1.0);
                    auto* o = static_cast<double*>(out);
                    for (size_t i = 0; i < count; ++i) o[i] = d(mt64);
                  },
                  [&](const void* out, uint64_t i, size_t j) {
                    return static_cast<const double*>(out)[j] == rng::uniformFloat64(key, i);
                  }});
  rows.push_back({"normal float32", "mt19937+normal<float>",
                  spec(rng::Distribution::kNormal, DataType::kFloat32), 1,
                  [&](void* out, size_t count) {
                    std::normal_distribution<float> d(0.0f, 1.0f);
                    auto* o = static_cast<float*>(out);
                    for (size_t i = 0; i < count; ++i) o[i] = d(mt);
                  },
                  [&](const void* out, uint64_t i, size_t j) {
                    return static_cast<const float*>(out)[j] == rng::normalFloat32(key, i, 0, 1);
                  }});
  rows.push_back({"bernoulli(0.1) float32", "mt19937+bernoulli",
                  spec(rng::Distribution::kBernoulli, DataType::kFloat32), 1,
                  [&](void* out, size_t count) {
                    std::bernoulli_distribution d(0.1);
                    auto* o = static_cast<float*>(out);
                    for (size_t i = 0; i < count; ++i) o[i] = d(mt) ? 1.0f : 0.0f;
                  },
                  [&](const void* out, uint64_t i, size_t j) {
                    const bool one = rng::bernoulli(key, i, rng::bernoulliThreshold(0.1));
                    return static_cast<const float*>(out)[j] == (one ? 1.0f : 0.0f);
                  }});
  rows.push_back({"randint(1000) int64", "mt19937_64+uniform_int",
                  spec(rng::Distribution::kRandint, DataType::kInt64), 1,
                  [&](void* out, size_t count) {
                    std::uniform_int_distribution<int64_t> d(0, 999);
                    auto* o = static_cast<int64_t*>(out);
                    for (size_t i = 0; i < count; ++i) o[i] = d(mt64);
                  },
                  [&](const void* out, uint64_t i, size_t j) {
                    return static_cast<const int64_t*>(out)[j] ==
                           static_cast<int64_t>(rng::randint(key, i, 1000));
                  }});
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (cores > 1) {
    Row parallel = rows[0];
    parallel.name = "uniform float32, " + std::to_string(cores) + " threads";
    parallel.peer += ", 1 thread";
    parallel.threads = cores;
    rows.push_back(parallel);
  }

  std::vector<uint8_t> buffer(n * 8);
  std::printf("# detcoll random fills vs std::<random>, %zu elements x %d repeats, best of %d\n", n,
              repeats, trials);
  std::printf("%-34s %12s | %-40s %12s | %7s %7s\n", "#fill", "detcoll(ns)", "peer", "peer(ns)",
              "ratio", "#wrong");
  double worstUniform = 0;
  for (Row& row : rows) {
    double ours = 1e30, theirs = 1e30;
    uint64_t offset = 0;
    for (int t = 0; t < trials; ++t) {  // interleaved, so both see the same machine
      ours = std::min(ours, secondsOf(
                                [&](int r) {
                                  offset = static_cast<uint64_t>(t * repeats + r) * n;
                                  (void)rng::fillHost(key, row.spec, offset, n, buffer.data(),
                                                      row.threads);
                                },
                                repeats));
      theirs = std::min(theirs, secondsOf([&](int) { row.peerFill(buffer.data(), n); }, repeats));
    }
    (void)rng::fillHost(key, row.spec, offset, n, buffer.data(), row.threads);
    size_t wrong = 0;
    for (size_t j = 0; j < n; j += 1 + j % 7)
      wrong += row.check(buffer.data(), offset + j, j) ? 0 : 1;
    const double scale = 1e9 / (static_cast<double>(n) * repeats);
    const double ratio = theirs / ours;
    if (row.threads == 1 && row.name == "uniform float32") worstUniform = ratio;
    std::printf("%-34s %12.3f | %-40s %12.3f | %7.2f %7zu\n", row.name.c_str(), ours * scale,
                row.peer.c_str(), theirs * scale, ratio, wrong);
  }
  std::printf(
      "# uniform float32 per core: %.2fx the speed of mt19937 + uniform_real_distribution\n",
      worstUniform);
  return 0;
}
