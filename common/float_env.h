#pragma once

// The floating-point environment detcoll's reductions are defined in (docs/design.md, "The
// determinism contract"): round to nearest even, subnormal inputs and results kept. A calling
// thread may have changed it (flush-to-zero and denormals-are-zero from
// torch.set_flush_denormal(True) or code built with -ffast-math, another rounding mode from
// fesetround), and the same call would then give other bits on that thread than on another, or
// on one rank than on the next; a thread that enabled floating-point traps would trap on a sum
// whose defined result is inf. A scope of ExactFloatingPoint runs in the defined environment
// and gives the thread its own back afterwards.

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace detcoll {

class ExactFloatingPoint {
 public:
  ExactFloatingPoint() {
#if defined(__x86_64__) || defined(__i386__)
    saved_ = _mm_getcsr();
    // MXCSR: FTZ (bit 15), DAZ (bit 6), rounding control (bits 13-14; 0 is to nearest) cleared;
    // every exception masked (bits 7-12), so that a result whose defined value is inf or NaN
    // does not trap on a thread that enabled traps (feenableexcept).
    constexpr uint32_t kChanged = (1u << 15) | (1u << 6) | (3u << 13);
    constexpr uint32_t kMasks = 0x3fu << 7;
    const uint32_t exact = (saved_ & ~kChanged) | kMasks;
    if (exact != saved_) _mm_setcsr(exact);
#elif defined(__aarch64__)
    __asm__ volatile("mrs %0, fpcr" : "=r"(saved_));
    // FPCR: FZ (bit 24), FZ16 (bit 19), rounding mode (bits 22-23; 0 is to nearest), and the
    // trap enables (bits 8-12, 15) cleared.
    constexpr uint64_t kChanged =
        (1ull << 24) | (1ull << 19) | (3ull << 22) | (0x1full << 8) | (1ull << 15);
    if ((saved_ & kChanged) != 0) {
      const uint64_t exact = saved_ & ~kChanged;
      __asm__ volatile("msr fpcr, %0" : : "r"(exact));
    }
#endif
  }
  ~ExactFloatingPoint() {
#if defined(__x86_64__) || defined(__i386__)
    if (_mm_getcsr() != saved_) _mm_setcsr(saved_);
#elif defined(__aarch64__)
    __asm__ volatile("msr fpcr, %0" : : "r"(saved_));
#endif
  }
  ExactFloatingPoint(const ExactFloatingPoint&) = delete;
  ExactFloatingPoint& operator=(const ExactFloatingPoint&) = delete;

 private:
#if defined(__aarch64__)
  uint64_t saved_ = 0;
#else
  uint32_t saved_ = 0;
#endif
};

}  // namespace detcoll
