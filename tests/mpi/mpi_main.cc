// GoogleTest main for the mpirun tier: detcoll_init before the tests, detcoll_finalize after.
// Every rank runs every test; only rank 0 prints the progress, any rank's failure fails the run.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "detcoll.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (detcoll_init() != DETCOLL_SUCCESS) {
    std::fprintf(stderr, "detcoll_init failed: %s\n", detcoll_last_error());
    return 1;
  }
  const int rank = detcoll_rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("detcoll mpi tests on %d ranks: %s\n", detcoll_size(),
                anyFailed ? "FAILED" : "passed");
  detcoll_finalize();
  return anyFailed ? 1 : 0;
}
