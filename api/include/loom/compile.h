// loom::compile: a function of tensors traced once per argument signature
// and then replayed without recording (as mlx::core::compile or jax.jit).
//
// A plain loom loop already replays a cached executable, but every call
// still records its ops, hashes the graph and looks it up: a few µs per
// call, which is most of a small control step's time. A compiled function
// pays that once; a later call with arguments of the same signature binds
// their buffers to the executable of the first call and runs it.
//
//   auto step = loom::compile([&](const std::vector<loom::Tensor>& in) {
//     loom::Tensor a = loom::tanh(loom::tanh(in[0].matmul(W1)).matmul(W2));
//     return std::vector<loom::Tensor>{loom::clamp(in[0] * 0.99 + a * 0.01, -1, 1)};
//   });
//   for (;;) s = step({s})[0];
//
// What a trace fixes, and what a replay sees:
//  - Arguments: their dtype, device, shape, strides and offset, whether they
//    require grad, and which of them share a storage form the signature; a
//    new signature is traced anew. Their values are read at every call.
//  - Tensors the function reads without taking them as arguments (weights
//    in a lambda's capture) are captured at the trace: every call reads the
//    same storage, so in-place updates of it (an optimizer's step) are seen,
//    but a variable later rebound to another tensor is not. Pass what is
//    replaced between calls as an argument.
//  - Numbers (a double in the function) are constants of the trace, as in
//    jax.jit: pass a changing number as a 0-d tensor argument. An
//    optimizer's are the exception: a replay moves its step counts on and
//    computes the numbers that change between steps (learning rate, SGD's
//    first-step factors, Adam's bias corrections) anew for its step; the
//    others (momentum, betas, weight decay, ...) are checked, and a call
//    where one changed traces the function again (the same graph: nothing
//    compiles).
//    A module's training mode read while tracing (Dropout) is checked the
//    same way, and so is the executable cache: after
//    loom::clear_executable_cache() or a change of TF32 mode the next call
//    traces and compiles again.
//  - Random numbers (randn, dropout) are fresh at every call: each replay
//    takes its counters from the generator, in the order the trace did.
//  - In-place updates of tensors that existed before the call (arguments,
//    parameters, optimizer state, gradients zeroed in place) are redone by
//    every replay, into the same storage.
// What a function may not do (each raises loom::Error at the trace, naming
// what to change): read a value (item(), data_ptr(), printing) while it is
// traced; return a tensor with a grad_fn (return loss.detach()); leave a
// tensor it made alive anywhere but in its results (a .grad() that
// backward() created: zero the gradients in place with
// zero_grad(/*set_to_none=*/false)); work on two devices. A sync inside it
// (an optimizer's step() syncs) is deferred to its end.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include <loom/tensor.h>

#pragma GCC visibility push(default)
namespace loom {

using TensorFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

class CompiledFunction {
 public:
  explicit CompiledFunction(TensorFunction fn);
  // Traces on the first call of a signature, replays after; results are
  // materialized tensors (on a GPU, queued as any sync's: reading one waits).
  std::vector<Tensor> operator()(const std::vector<Tensor>& args, LOOM_LOC) const;
  // Signatures traced so far.
  size_t traces() const;

  struct State;  // api/src/compile.cpp

 private:
  std::shared_ptr<State> state_;
};

inline CompiledFunction compile(TensorFunction fn) { return CompiledFunction(std::move(fn)); }

}  // namespace loom
#pragma GCC visibility pop
