#pragma once

// The deterministic ops as a data-parallel machine computes them: the formulation of the CUDA
// kernels, written once over an executor that is either the GPU (kernels/ops/device.cu, through
// kernels/device_executor.cuh) or the host (tests/support/serial_executor.h: one grid index at a
// time, the GPU algorithm's serial run, which CI runs). Every kernel is a body called once per
// index of a grid; no body's result depends on any other's timing, so the bits are those of the
// CPU reference whatever the launch configuration. One header per op family, each holding the
// data-parallel formulation of the CPU reference of the same name in kernels/ops/:
//   bodies/segment.h    the segment engine: sort by destination, reduce each destination in order
//   bodies/scatter.h    the scatter family (scatter_add ... bincount) over that engine
//   bodies/axis_sums.h  sums over axes with the fixed tree, and bias_add's gradient
//   bodies/resample.h   bilinear backward and max pooling, as gathers
//   bodies/taps.h       the backward of padding, pooling and upsampling (linear, nearest,
//                       bicubic) as weighted_scatter of their taps
//   bodies/grid_sample.h, ctc.h, losses.h, selection.h, crop.h, writes.h
//                       grid_sample's and ctc_loss's backward, nll_loss, kthvalue and median,
//                       crop_and_resize, and the writes through indices (max_unpool,
//                       write_last, embedding_bag's max gradient, histc)
// This header holds what they share: the executor's contract and the index checks' failure slot.
//
// An Executor provides
//   T* alloc<T>(int64_t n)                     scratch freed with the executor
//   void launch(int64_t n, const Body& body)   body(i) for every i in [0, n)
//   void sortPairs(const K* keysIn, K* keysOut, const V* valuesIn, V* valuesOut, int64_t n,
//                  int endBit)                 stable by key bits [0, endBit)
//   void toHost(void* dst, const void* src, size_t bytes)
//   void toDevice(void* dst, const void* src, size_t bytes)
//   void minMax(const int64_t* x, int64_t n, int64_t* lo, int64_t* hi)
//   Status status()                            the first failure of the above, if any
//
// A check body records a bad position with recordFirst (resample_kernels.h) in a slot that
// starts at kNoFailure: the smallest position wins, whatever the thread order, so the error names
// the entry the CPU reference names.

#include <cstdint>
#include <limits>

#include "common/status.h"
#include "kernels/ops/resample_kernels.h"

namespace detcoll::kernels::ops::bodies {

using resample::recordFirst;

constexpr int64_t kNoFailure = std::numeric_limits<int64_t>::max();

// The first failure a check body recorded, read back.
template <typename E>
int64_t firstFailure(E& e, const int64_t* slot) {
  int64_t v = kNoFailure;
  e.toHost(&v, slot, sizeof(v));
  return v;
}

template <typename E>
int64_t* failureSlot(E& e) {
  int64_t* slot = e.template alloc<int64_t>(1);
  const int64_t none = kNoFailure;
  e.toDevice(slot, &none, sizeof(none));
  return slot;
}

// Runs the check body make(slot) over [0, n); *failed gets the first position it recorded
// (kNoFailure: none).
template <typename E, typename MakeBody>
Status runCheck(E& e, int64_t n, const MakeBody& make, int64_t* failed) {
  int64_t* slot = failureSlot(e);
  e.launch(n, make(slot));
  *failed = firstFailure(e, slot);
  return e.status();
}

template <typename E>
int64_t readIndex(E& e, const int64_t* array, int64_t at) {
  int64_t v = 0;
  e.toHost(&v, array + at, sizeof(v));
  return v;
}

}  // namespace detcoll::kernels::ops::bodies
