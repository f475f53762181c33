/* Sums each rank's (rank + 0.25) through the installed library and checks the result. */
#include <detcoll.h>
#include <stdio.h>

int main(void) {
  if (detcoll_init() != DETCOLL_SUCCESS) {
    fprintf(stderr, "detcoll_init: %s\n", detcoll_last_error());
    return 1;
  }
  const int size = detcoll_size();
  double mine = detcoll_rank() + 0.25, sum = 0;
  if (detcoll_allreduce(&mine, &sum, 1, DETCOLL_FLOAT64, DETCOLL_SUM, "consumer") != DETCOLL_SUCCESS) {
    fprintf(stderr, "detcoll_allreduce: %s\n", detcoll_last_error());
    return 1;
  }
  const double expected = size * (size - 1) / 2.0 + 0.25 * size;
  printf("rank %d of %d: sum %g, expected %g\n", detcoll_rank(), size, sum, expected);
  detcoll_finalize();
  return sum == expected ? 0 : 1;
}
