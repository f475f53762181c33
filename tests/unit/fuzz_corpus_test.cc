// The fuzz targets' corpora replayed without libFuzzer: every file of tests/fuzz/corpus/<target>/
// (the seeds, and crash-* inputs that once broke a decoder or a verdict) runs through its target
// (tests/fuzz/targets.h), so that the properties the fuzzers check (scripts/fuzz.sh) hold in every
// CI run, in the normal build and in scripts/sanitize.sh's. A violated property aborts, naming
// the file just replayed.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/targets.h"

namespace detcoll {
namespace {

namespace fs = std::filesystem;

fs::path corpusRoot() {
  if (const char* dir = std::getenv("DETCOLL_FUZZ_CORPUS")) return dir;
  return fs::path(__FILE__).parent_path().parent_path() / "fuzz" / "corpus";
}

class FuzzCorpusTest : public ::testing::TestWithParam<fuzz::Target> {};

TEST_P(FuzzCorpusTest, EveryFilePassesItsTarget) {
  const fuzz::Target& target = GetParam();
  const fs::path dir = corpusRoot() / target.name;
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is not a folder (set DETCOLL_FUZZ_CORPUS)";
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << "no corpus in " << dir;
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in),
                                  std::istreambuf_iterator<char>()};
    std::fprintf(stderr, "replaying %s\n", file.c_str());
    target.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpusTest, ::testing::ValuesIn(fuzz::kTargets),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace detcoll
