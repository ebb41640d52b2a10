// Autograd's per-tensor state and the few helpers every part of autograd
// uses: grad mode, a tensor's gradient edge (where its gradient goes), and
// setting the history of a freshly recorded result.
#pragma once
#include <loom/autograd.h>

#include <memory>

#include "api/src/tensor_impl.h"

namespace loom::detail {

// A tensor's autograd state, made the first time it takes part.
struct AutogradMeta {
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;
  bool leaf_requires_grad = false;          // a leaf the user asked gradients of
  bool retains_grad = false;
  Tensor grad;
  // Leaves: the node that accumulates into `grad`, shared by every use
  // while a graph holds it.
  std::weak_ptr<autograd::Node> grad_accumulator;
};

// Grad mode of this thread. initial-exec: a plain load on every recorded op.
extern __attribute__((tls_model("initial-exec"))) thread_local bool t_grad_disabled;
inline bool grad_mode() { return !t_grad_disabled; }

// Whether `im` takes part in autograd: it requires grad, or it is a view
// whose base gained a history since the view's own was set (an in-place
// write through another view, or on the base).
inline bool takes_grad(const TensorImpl& im) {
  if (im.requires_grad) return true;
  const TensorImpl* base = im.view_base.get();
  return base && base->requires_grad && im.view_version != im.storage->version.load(std::memory_order_relaxed);
}
// What every hook tests first: grad mode on and an input taking part.
inline bool needs_grad(const Tensor& a) { return grad_mode() && takes_grad(*a.impl()); }
inline bool needs_grad(const Tensor& a, const Tensor& b) {
  return grad_mode() && (takes_grad(*a.impl()) || takes_grad(*b.impl()));
}

AutogradMeta& meta_of(const Tensor& t);  // made if missing

// The edge a gradient of `t` flows into: its grad_fn, or a leaf's
// AccumulateGrad; invalid if t needs no gradient. A view whose base was
// written in place since gets its history rebuilt from the base first.
autograd::Edge gradient_edge(const Tensor& t);

// Makes `out` (just recorded) an output of `fn`: its grad_fn and output_nr.
void set_history(const Tensor& out, const std::shared_ptr<autograd::Node>& fn);

// A view of t's storage with the given geometry, sharing nothing else.
Tensor strided_alias(const Tensor& t, const ViewSpec& view);
// A view of `whole` (a tensor laid out as its whole storage) with geometry
// `spec`, recorded as a view of it: a write through it reaches whole's
// history (CopySlices), and reading it is differentiable (AsStridedBackward0).
Tensor as_strided_view(const Tensor& whole, const ViewSpec& spec, const SourceLoc& loc);
// Gives a view whose base gained a history since its own was set (an
// in-place write) the history "a view of the base" (inplace.cpp).
void regenerate_view_history(const Tensor& t);
// Whether a tensor is laid out as its whole storage, contiguously.
bool is_whole_storage(const TensorImpl& t);
// t's storage and view with no autograd state (a saved output, detach()).
Tensor plain_alias(const Tensor& t);

}  // namespace loom::detail
