// The recording side of autocast (api/include/loom/autocast.h): the
// per-thread state, and the two casts an op on one of autocast's lists
// applies to its inputs before it records anything.
//
//   lower(t)     an op on the lower-precision list (matmul, linear, conv,
//                attention): a floating input other than float64 becomes
//                the region's dtype.
//   to_float(t)  an op on the float32 list (softmax, norms, losses, exp,
//                log, ...): a bfloat16 or float16 input becomes float32.
//
// Both return `t` itself when autocast is off for t's device, so an op pays
// one thread-local load when no region is open.
#pragma once

#include <loom/autocast.h>
#include <loom/tensor.h>

namespace loom::detail::autocast {

struct State {
  bool enabled[2] = {false, false};  // by DeviceType: CPU, CUDA
  ScalarType dtype[2] = {kBFloat16, kHalf};
  bool cache = true;
  int nesting = 0;
  int suspended = 0;  // > 0 while autograd runs a backward pass
};
inline thread_local State tls_state;

// Whether any region is open on this thread: the one load a recorded op
// pays when none is.
inline bool any_region() { return tls_state.enabled[0] || tls_state.enabled[1]; }

inline bool active(DeviceType d) {
  const State& s = tls_state;
  return s.enabled[static_cast<int>(d)] && s.suspended == 0;
}

// An op on the float32 list with a bfloat16 or float16 input, inside a
// region: the op calls itself again on the input cast to float32.
inline bool wants_float(const Tensor& t) {
  return any_region() && t.defined() && active(t.device().type()) &&
         is_reduced_floating_point(t.dtype());
}

Tensor lower(const Tensor& t, const SourceLoc& loc);
Tensor to_float(const Tensor& t, const SourceLoc& loc);

// While alive, no op casts: the backward pass runs each gradient in the
// dtypes of its forward, whatever region the caller of backward() is in.
class Suspend {
 public:
  Suspend() { ++tls_state.suspended; }
  ~Suspend() { --tls_state.suspended; }
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;
};

}  // namespace loom::detail::autocast
