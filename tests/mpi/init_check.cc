// Runs detcoll_init under the environment mpirun gives it and checks the outcome on this rank:
//   detcoll_init_check EXPECTED_STATUS EXPECTED_TEXT
// EXPECTED_STATUS is SUCCESS, INVALID_ARGUMENT, MISMATCH, ...; EXPECTED_TEXT must appear in
// detcoll_last_error(). Exits 0 when both hold, 1 otherwise; always finalizes (no hang, no abort).

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "detcoll.h"
#include "status_name.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s EXPECTED_STATUS EXPECTED_TEXT\n", argv[0]);
    return 2;
  }
  const detcoll_status_t status = detcoll_init();
  const char* message = detcoll_last_error();
  bool ok =
      std::strcmp(statusName(status), argv[1]) == 0 && std::strstr(message, argv[2]) != nullptr;
  if (status == DETCOLL_SUCCESS) {
    // A usable library: a tiny allreduce must work and sum the ranks.
    const double mine = 1.5;
    double sum = 0;
    ok = ok &&
         detcoll_allreduce(&mine, &sum, 1, DETCOLL_FLOAT64, DETCOLL_SUM, "check") ==
             DETCOLL_SUCCESS &&
         sum == 1.5 * detcoll_size();
  }
  std::printf("pid %d: detcoll_init returned %s (%s); expected %s containing '%s': %s\n",
              static_cast<int>(getpid()), statusName(status), message, argv[1], argv[2],
              ok ? "ok" : "WRONG");
  if (detcoll_finalize() != DETCOLL_SUCCESS) {
    std::printf("detcoll_finalize failed: %s\n", detcoll_last_error());
    ok = false;
  }
  return ok ? 0 : 1;
}
