// The random state across ranks, through the C API: the root seed agreed at init, seeds and
// restored states that must match on every rank, counters and checkpoints.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <string>
#include <vector>

#include "detcoll.h"
#include "tests/mpi/mpi_test_util.h"

namespace detcoll::testing {
namespace {

template <typename T>
std::vector<T> gatherAll(const T& mine) {
  std::vector<T> all(worldSize());
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  return all;
}

uint64_t currentSeed() {
  uint64_t seed = 0;
  EXPECT_EQ(detcoll_rng_get_seed(&seed), DETCOLL_SUCCESS) << detcoll_last_error();
  return seed;
}

std::vector<uint8_t> saveState() {
  size_t needed = 0;
  EXPECT_EQ(detcoll_rng_state_save(nullptr, 0, &needed), DETCOLL_ERR_INVALID_ARGUMENT);
  std::vector<uint8_t> bytes(needed);
  EXPECT_EQ(detcoll_rng_state_save(bytes.data(), bytes.size(), &needed), DETCOLL_SUCCESS)
      << detcoll_last_error();
  EXPECT_EQ(needed, bytes.size());
  return bytes;
}

// Puts the seed back after a test that changes it.
class RngStateTest : public ::testing::Test {
 protected:
  void SetUp() override { seed_ = currentSeed(); }
  void TearDown() override { EXPECT_EQ(detcoll_rng_seed(seed_), DETCOLL_SUCCESS); }
  uint64_t seed_ = 0;
};

TEST(RngSeedTest, EveryRankHasTheRootSeedAgreedAtInit) {
  const uint64_t seed = currentSeed();
  for (uint64_t other : gatherAll(seed)) EXPECT_EQ(other, seed);
  detcoll_rng_key_t root, expected;
  ASSERT_EQ(detcoll_rng_root_key(&root), DETCOLL_SUCCESS);
  ASSERT_EQ(detcoll_rng_key_from_seed(seed, &expected), DETCOLL_SUCCESS);
  EXPECT_EQ(std::memcmp(&root, &expected, sizeof root), 0);
}

TEST_F(RngStateTest, SeedsThatDifferFailOnEveryRankAndChangeNothing) {
  if (worldSize() < 2) GTEST_SKIP() << "a seed can only differ between ranks at np >= 2";
  const int last = worldSize() - 1;
  const uint64_t mine = 1000 + (worldRank() == last ? 1 : 0);
  EXPECT_EQ(detcoll_rng_seed(mine), DETCOLL_ERR_MISMATCH);
  const std::string message = detcoll_last_error();
  EXPECT_NE(message.find("1000 on rank"), std::string::npos) << message;
  EXPECT_NE(message.find("1001 on rank " + std::to_string(last)), std::string::npos) << message;
  EXPECT_EQ(currentSeed(), seed_);
}

TEST_F(RngStateTest, RanksOutOfStepAreToldSoInsteadOfHanging) {
  if (worldSize() < 2) GTEST_SKIP() << "ranks can only be out of step at np >= 2";
  // Rank 0 sets a seed while the others broadcast, then rank 0 restores while the others seed.
  double value = 1.25;
  const detcoll_status_t first = worldRank() == 0
                                     ? detcoll_rng_seed(seed_)
                                     : detcoll_broadcast(&value, 1, DETCOLL_FLOAT64, 0, "x");
  EXPECT_EQ(first, DETCOLL_ERR_MISMATCH);
  std::string message = detcoll_last_error();
  EXPECT_NE(message.find("ranks are making different calls"), std::string::npos) << message;
  EXPECT_NE(message.find("seed agreement"), std::string::npos) << message;
  EXPECT_EQ(value, 1.25) << "a refused broadcast wrote its buffer";

  const std::vector<uint8_t> state = saveState();
  const detcoll_status_t second = worldRank() == 0
                                      ? detcoll_rng_state_restore(state.data(), state.size())
                                      : detcoll_rng_seed(seed_);
  EXPECT_EQ(second, DETCOLL_ERR_MISMATCH);
  message = detcoll_last_error();
  EXPECT_NE(message.find("random state restore"), std::string::npos) << message;
  EXPECT_EQ(currentSeed(), seed_);
}

TEST_F(RngStateTest, AnAgreedSeedReplacesTheRootKeyAndKeepsCounters) {
  ASSERT_EQ(detcoll_rng_counter_set("epoch", 7), DETCOLL_SUCCESS);
  ASSERT_EQ(detcoll_rng_seed(0x0123456789abcdefull), DETCOLL_SUCCESS) << detcoll_last_error();
  EXPECT_EQ(currentSeed(), 0x0123456789abcdefull);
  detcoll_rng_key_t root, expected;
  ASSERT_EQ(detcoll_rng_root_key(&root), DETCOLL_SUCCESS);
  detcoll_rng_key_from_seed(0x0123456789abcdefull, &expected);
  EXPECT_EQ(std::memcmp(&root, &expected, sizeof root), 0);
  uint64_t epoch = 0;
  ASSERT_EQ(detcoll_rng_counter_get("epoch", &epoch), DETCOLL_SUCCESS);
  EXPECT_EQ(epoch, 7u);
}

TEST_F(RngStateTest, ACheckpointRestoresSeedAndCounters) {
  ASSERT_EQ(detcoll_rng_counter_set("checkpoint.step", 41), DETCOLL_SUCCESS);
  uint64_t step = 0;
  ASSERT_EQ(detcoll_rng_counter_next("checkpoint.step", &step), DETCOLL_SUCCESS);
  EXPECT_EQ(step, 41u);
  const std::vector<uint8_t> checkpoint = saveState();

  // Training goes on: counters move and the seed changes.
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(detcoll_rng_counter_next("checkpoint.step", &step), DETCOLL_SUCCESS);
  ASSERT_EQ(detcoll_rng_counter_set("checkpoint.epoch", 3), DETCOLL_SUCCESS);
  ASSERT_EQ(detcoll_rng_seed(99), DETCOLL_SUCCESS);

  ASSERT_EQ(detcoll_rng_state_restore(checkpoint.data(), checkpoint.size()), DETCOLL_SUCCESS)
      << detcoll_last_error();
  EXPECT_EQ(currentSeed(), seed_);
  ASSERT_EQ(detcoll_rng_counter_get("checkpoint.step", &step), DETCOLL_SUCCESS);
  EXPECT_EQ(step, 42u);
  uint64_t epoch = 1;
  ASSERT_EQ(detcoll_rng_counter_get("checkpoint.epoch", &epoch), DETCOLL_SUCCESS);
  EXPECT_EQ(epoch, 0u) << "a counter set after the checkpoint survived the restore";
  EXPECT_EQ(saveState(), checkpoint);
}

TEST_F(RngStateTest, StatesThatDifferOrAreCorruptFailOnEveryRankAndChangeNothing) {
  ASSERT_EQ(detcoll_rng_counter_set("step", 5), DETCOLL_SUCCESS);
  const std::vector<uint8_t> before = saveState();
  const int last = worldSize() - 1;

  if (worldSize() >= 2) {
    // The last rank restores a checkpoint of another step.
    ASSERT_EQ(detcoll_rng_counter_set("step", worldRank() == last ? 6 : 5), DETCOLL_SUCCESS);
    const std::vector<uint8_t> diverged = saveState();
    ASSERT_EQ(detcoll_rng_counter_set("step", 9), DETCOLL_SUCCESS);
    const std::vector<uint8_t> moved = saveState();
    EXPECT_EQ(detcoll_rng_state_restore(diverged.data(), diverged.size()), DETCOLL_ERR_MISMATCH);
    const std::string message = detcoll_last_error();
    EXPECT_NE(message.find("restored random state differs"), std::string::npos) << message;
    EXPECT_NE(message.find("rank " + std::to_string(last)), std::string::npos) << message;
    EXPECT_EQ(saveState(), moved) << "a refused restore changed the state";
    ASSERT_EQ(detcoll_rng_counter_set("step", 5), DETCOLL_SUCCESS);
  }

  // One rank's checkpoint is damaged: every rank fails, naming it.
  std::vector<uint8_t> damaged = before;
  if (worldRank() == last) damaged[damaged.size() / 2] ^= 0x10;
  EXPECT_EQ(detcoll_rng_state_restore(damaged.data(), damaged.size()),
            DETCOLL_ERR_INVALID_ARGUMENT);
  const std::string message = detcoll_last_error();
  EXPECT_NE(message.find("rank " + std::to_string(last) + ": random state"), std::string::npos)
      << message;
  EXPECT_EQ(saveState(), before);
}

}  // namespace
}  // namespace detcoll::testing
