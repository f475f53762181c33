#pragma once

// The name of a C status, for the programs that judge runs through the C API alone
// (init_check.cc, failure_check.cc): the same names as the library's own statusCodeName.

#include "detcoll.h"

inline const char* statusName(detcoll_status_t s) {
  switch (s) {
    case DETCOLL_SUCCESS:
      return "SUCCESS";
    case DETCOLL_ERR_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case DETCOLL_ERR_MISMATCH:
      return "MISMATCH";
    case DETCOLL_ERR_TIMEOUT:
      return "TIMEOUT";
    case DETCOLL_ERR_BACKEND:
      return "BACKEND";
    case DETCOLL_ERR_NOT_INITIALIZED:
      return "NOT_INITIALIZED";
    case DETCOLL_ERR_INTERNAL:
      return "INTERNAL";
  }
  return "UNKNOWN";
}
