// bindings/c/detcoll.h without MPI: everything that must hold before detcoll_init. The unit tests
// never call detcoll_init (tests/mpi does).

#include "bindings/c/detcoll.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "common/dtype.h"
#include "common/status.h"

namespace detcoll {
namespace {

std::string lastError() {
  return detcoll_last_error();
}

void expectNotInitialized(detcoll_status_t status, const std::string& call) {
  EXPECT_EQ(status, DETCOLL_ERR_NOT_INITIALIZED) << call;
  EXPECT_NE(lastError().find(call), std::string::npos)
      << "last error does not name " << call << ": " << lastError();
}

TEST(CApiTest, CudaStreamIsTheCallingThreadsAndNeedsNoInit) {
  // Before init, from any thread: the setting is the thread's own.
  EXPECT_EQ(detcoll_set_cuda_stream(nullptr), DETCOLL_SUCCESS) << detcoll_last_error();
  // A stream handle is only checked for being given; a build without CUDA refuses one, naming why.
  int token = 0;
  const detcoll_status_t set = detcoll_set_cuda_stream(&token);
  if (detcoll_built_with_cuda()) {
    EXPECT_EQ(set, DETCOLL_SUCCESS) << detcoll_last_error();
  } else {
    EXPECT_EQ(set, DETCOLL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(detcoll_last_error()).find("no CUDA"), std::string::npos);
    EXPECT_EQ(detcoll_nccl_version(), 0) << "NCCL without CUDA";
  }
  EXPECT_EQ(detcoll_set_cuda_stream(nullptr), DETCOLL_SUCCESS);
}

TEST(CApiTest, CollectivesBeforeInitFailWithNotInitialized) {
  float send[4] = {1, 2, 3, 4};
  float recv[4] = {9, 9, 9, 9};
  expectNotInitialized(detcoll_allreduce(send, recv, 4, DETCOLL_FLOAT32, DETCOLL_SUM, "x"),
                       "detcoll_allreduce");
  const void* leaves[1] = {send};
  expectNotInitialized(
      detcoll_allreduce_leaves(leaves, 1, recv, 4, DETCOLL_FLOAT32, DETCOLL_SUM, "x"),
      "detcoll_allreduce_leaves");
  expectNotInitialized(detcoll_broadcast(recv, 4, DETCOLL_FLOAT32, 0, "x"), "detcoll_broadcast");
  expectNotInitialized(detcoll_allgather(send, recv, 1, DETCOLL_FLOAT32, "x"), "detcoll_allgather");
  expectNotInitialized(detcoll_finalize(), "detcoll_finalize");
  // Even with bad arguments, the missing init is what is reported.
  expectNotInitialized(detcoll_allreduce(nullptr, nullptr, 4, static_cast<detcoll_dtype_t>(17),
                                         DETCOLL_SUM, nullptr),
                       "detcoll_allreduce");
  for (float v : recv) EXPECT_EQ(v, 9.0f) << "a failed call wrote its output";
}

TEST(CApiTest, RankAndSizeAreMinusOneBeforeInit) {
  EXPECT_EQ(detcoll_rank(), -1);
  EXPECT_EQ(detcoll_size(), -1);
  EXPECT_EQ(detcoll_local_rank(), -1);
  EXPECT_EQ(detcoll_local_size(), -1);
}

TEST(CApiTest, SetModeRejectsUnknownValues) {
  const detcoll_mode_t before = detcoll_get_mode();
  for (int bad : {3, -1, 17}) {
    EXPECT_EQ(detcoll_set_mode(static_cast<detcoll_mode_t>(bad)), DETCOLL_ERR_INVALID_ARGUMENT)
        << bad;
    EXPECT_NE(lastError().find(std::to_string(bad)), std::string::npos) << lastError();
    EXPECT_EQ(detcoll_get_mode(), before);
  }
}

TEST(CApiTest, InvariantModeCanBeSetBeforeInit) {
  const detcoll_mode_t before = detcoll_get_mode();
  ASSERT_EQ(detcoll_set_mode(DETCOLL_MODE_INVARIANT), DETCOLL_SUCCESS) << lastError();
  EXPECT_EQ(detcoll_get_mode(), DETCOLL_MODE_INVARIANT);
  ASSERT_EQ(detcoll_set_mode(before), DETCOLL_SUCCESS) << lastError();
  EXPECT_EQ(detcoll_get_mode(), before);
}

TEST(CApiTest, SetModeBeforeInitOverridesTheMode) {
  ASSERT_EQ(detcoll_set_mode(DETCOLL_MODE_NATIVE), DETCOLL_SUCCESS) << lastError();
  EXPECT_EQ(detcoll_get_mode(), DETCOLL_MODE_NATIVE);
  ASSERT_EQ(detcoll_set_mode(DETCOLL_MODE_ORDERED), DETCOLL_SUCCESS) << lastError();
  EXPECT_EQ(detcoll_get_mode(), DETCOLL_MODE_ORDERED);
}

TEST(CApiTest, LastErrorIsPerThread) {
  expectNotInitialized(detcoll_broadcast(nullptr, 0, DETCOLL_FLOAT32, 0, nullptr),
                       "detcoll_broadcast");
  std::string inThread = "unset";
  std::string afterFailure;
  std::thread worker([&] {
    inThread = detcoll_last_error();
    (void)detcoll_allgather(nullptr, nullptr, 0, DETCOLL_INT64, nullptr);
    afterFailure = detcoll_last_error();
  });
  worker.join();
  EXPECT_EQ(inThread, "") << "a new thread sees another thread's error";
  EXPECT_NE(afterFailure.find("detcoll_allgather"), std::string::npos) << afterFailure;
  EXPECT_NE(lastError().find("detcoll_broadcast"), std::string::npos)
      << "another thread's failure replaced this thread's error: " << lastError();
}

TEST(CApiTest, EnumValuesMatchTheCoreTypes) {
  EXPECT_EQ(static_cast<int>(StatusCode::kSuccess), DETCOLL_SUCCESS);
  EXPECT_EQ(static_cast<int>(StatusCode::kInvalidArgument), DETCOLL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(static_cast<int>(StatusCode::kMismatch), DETCOLL_ERR_MISMATCH);
  EXPECT_EQ(static_cast<int>(StatusCode::kTimeout), DETCOLL_ERR_TIMEOUT);
  EXPECT_EQ(static_cast<int>(StatusCode::kBackend), DETCOLL_ERR_BACKEND);
  EXPECT_EQ(static_cast<int>(StatusCode::kNotInitialized), DETCOLL_ERR_NOT_INITIALIZED);
  EXPECT_EQ(static_cast<int>(StatusCode::kInternal), DETCOLL_ERR_INTERNAL);
  EXPECT_EQ(static_cast<int>(DataType::kFloat32), DETCOLL_FLOAT32);
  EXPECT_EQ(static_cast<int>(DataType::kFloat64), DETCOLL_FLOAT64);
  EXPECT_EQ(static_cast<int>(DataType::kFloat16), DETCOLL_FLOAT16);
  EXPECT_EQ(static_cast<int>(DataType::kBFloat16), DETCOLL_BFLOAT16);
  EXPECT_EQ(static_cast<int>(DataType::kInt32), DETCOLL_INT32);
  EXPECT_EQ(static_cast<int>(DataType::kInt64), DETCOLL_INT64);
  EXPECT_EQ(static_cast<int>(ReduceOp::kSum), DETCOLL_SUM);
  EXPECT_EQ(static_cast<int>(ReduceOp::kAverage), DETCOLL_AVERAGE);
  EXPECT_EQ(static_cast<int>(ReduceOp::kMin), DETCOLL_MIN);
  EXPECT_EQ(static_cast<int>(ReduceOp::kMax), DETCOLL_MAX);
  EXPECT_EQ(static_cast<int>(Mode::kNative), DETCOLL_MODE_NATIVE);
  EXPECT_EQ(static_cast<int>(Mode::kOrdered), DETCOLL_MODE_ORDERED);
  EXPECT_EQ(static_cast<int>(Mode::kInvariant), DETCOLL_MODE_INVARIANT);
}

}  // namespace
}  // namespace detcoll
