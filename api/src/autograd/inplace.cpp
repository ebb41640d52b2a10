// Autograd across in-place writes, as in PyTorch. A write to a whole tensor
// makes the written value's history the tensor's own. A write through a
// view changes its base: the base's new history is CopySlices (the old
// history outside the view, the value's inside), and every view of that
// base, the written one included, rebuilds its history from the base the
// next time it is used (its recorded storage version is behind).
#include <loom/functions.h>

#include "api/src/autograd/hooks.h"
#include "api/src/autograd/node.h"
#include "api/src/block_pool.h"
#include "api/src/record.h"

namespace loom::detail {

namespace {

using V = autograd::variable_list;

// node.ints: dims, sizes..., strides..., offset (a ViewSpec).
void put_spec(ir::Attrs& ints, const ViewSpec& v) {
  ints.push_back(v.sizes.n);
  for (size_t d = 0; d < v.sizes.n; ++d) ints.push_back(v.sizes[d]);
  for (size_t d = 0; d < v.sizes.n; ++d) ints.push_back(v.strides[d]);
  ints.push_back(v.offset);
}
ViewSpec get_spec(const ir::Attrs& ints) {
  const int nd = static_cast<int>(ints[0]);
  ViewSpec v;
  v.sizes.n = v.strides.n = static_cast<uint8_t>(nd);
  for (int d = 0; d < nd; ++d) {
    v.sizes[d] = ints[1 + d];
    v.strides[d] = ints[1 + nd + d];
  }
  v.offset = ints[1 + 2 * nd];
  return v;
}

// g, laid out as its whole storage (a copy if it is a view).
Tensor whole(const Tensor& g) { return is_whole_storage(*g.impl()) ? g : g.clone(); }

// The gradient of a view of a whole tensor (node.shape), placed into zeros.
V as_strided_b(const OpGrad& n, const Tensor& grad) {
  ViewSpec spec = get_spec(n.ints);
  Tensor g = grad;
  std::vector<int64_t> expanded;
  for (size_t d = 0; d < spec.sizes.n; ++d)
    if (spec.strides[d] == 0 && spec.sizes[d] > 1) {  // read many times: the gradient is the sum
      expanded.push_back(static_cast<int64_t>(d));
      spec.sizes[d] = 1;
    }
  if (!expanded.empty()) g = g.sum(expanded, true);
  Tensor out = zeros(to_ref(n.shape), TensorOptions(grad.dtype()).device(grad.device()));
  as_strided_view(out, spec, n.where()).copy_(g);
  return {out};
}

// The base's gradient: outside the view to its old history, inside to the
// written value's.
V copy_slices_b(const OpGrad& n, const Tensor& grad) {
  const ViewSpec spec = get_spec(n.ints);
  Tensor g = whole(grad);
  Tensor rest;
  if (n.needs(0)) {
    rest = g.clone();
    as_strided_view(rest, spec, n.where()).zero_();
  }
  return {rest, n.needs(1) ? as_strided_view(g, spec, n.where()) : Tensor()};
}

V pass_b(const OpGrad&, const Tensor& g) { return {g}; }
V none_b(const OpGrad&, const Tensor&) { return {Tensor()}; }

void check_base(const std::shared_ptr<TensorImpl>& base, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(is_whole_storage(*base), op, loc, "autograd cannot follow an in-place write through a view of ",
             describe(Tensor(base)),
             ", which does not cover its whole storage contiguously (from_blob with strides); clone() it first");
}

bool is_leaf_needing_grad(const TensorImpl& t) {
  return t.requires_grad && t.autograd && !t.autograd->grad_fn && t.autograd->leaf_requires_grad;
}

// Self's history is now `e` (the written value's), or its base's CopySlices.
void rebase(const Tensor& self, autograd::Edge e, const SourceLoc& loc) {
  TensorImpl& im = *self.impl();
  if (!im.view_base) {
    AutogradMeta& m = meta_of(self);
    m.grad_fn = e.function;
    m.output_nr = e.input_nr;
    im.requires_grad = e.is_valid();
    return;
  }
  Tensor base(im.view_base);
  auto cs = make_pooled<OpGrad>("CopySlices", copy_slices_b);
  cs->add_next_edge(gradient_edge(base));
  cs->add_next_edge(std::move(e));
  put_spec(cs->ints, im.view);
  cs->set_where(loc);
  set_history(base, cs);
  // `self` (and every other view of the base) is now behind the storage
  // version: gradient_edge rebuilds its history from the base.
}

}  // namespace

bool is_whole_storage(const TensorImpl& t) {
  return t.view.offset == 0 && t.view.sizes.numel() == t.storage->numel &&
         t.view.strides == ir::contiguous_strides(t.view.sizes);
}

Tensor as_strided_view(const Tensor& whole_t, const ViewSpec& spec, const SourceLoc& loc) {
  Tensor v = strided_alias(whole_t, spec);
  TensorImpl& im = *v.impl();
  const TensorImpl& base = *whole_t.impl();
  im.view_base = base.view_base ? base.view_base : whole_t.impl();
  im.view_version = im.storage->version.load(std::memory_order_relaxed);
  if (needs_grad(whole_t)) {
    if (auto n = attach("AsStridedBackward0", as_strided_b, {&whole_t}, v, loc)) {
      n->shape = base.view.sizes;
      put_spec(n->ints, spec);
    }
  }
  return v;
}

void regenerate_view_history(const Tensor& t) {
  TensorImpl& im = *t.impl();
  Tensor base(im.view_base);
  autograd::Edge base_edge = gradient_edge(base);
  im.view_version = im.storage->version.load(std::memory_order_relaxed);
  if (!base_edge.is_valid()) return;
  check_base(im.view_base, "autograd", SourceLoc::current());
  auto n = make_pooled<OpGrad>("AsStridedBackward0", as_strided_b);
  n->add_next_edge(std::move(base_edge));
  n->shape = im.view_base->view.sizes;
  put_spec(n->ints, im.view);
  set_history(t, n);
}

namespace grad {

bool begin_inplace_slow(const Tensor& self, const Tensor* value, const char* op, const SourceLoc& loc) {
  const TensorImpl& im = *self.impl();
  LOOM_CHECK(!is_leaf_needing_grad(im), op, loc, "a leaf tensor that requires grad (", describe(self),
             ") is being used in an in-place operation; update it under loom::NoGradGuard (as optimizers do), "
             "or write to a clone()");
  LOOM_CHECK(!(im.view_base && is_leaf_needing_grad(*im.view_base)), op, loc, "a view (", describe(self),
             ") of a leaf tensor that requires grad is being used in an in-place operation; update it under "
             "loom::NoGradGuard, or write to a clone()");
  if (im.view_base && takes_grad(*im.view_base)) check_base(im.view_base, op, loc);
  // The value's rule may have saved self (x.mul_(y) saves x for y's
  // gradient): it must keep seeing the old contents, not the new ones.
  if (value && value->impl()->autograd)
    if (auto* n = dynamic_cast<OpGrad*>(value->impl()->autograd->grad_fn.get()))
      for (SavedVariable& s : n->saved_variables()) {
        if (s.is_output() || !s.aliases(*im.storage)) continue;
        Tensor old = s.unpack(*n);
        Tensor snapshot = wrap(read(old, loc));
        autograd::Edge e = gradient_edge(old);
        if (e.is_valid()) {
          AutogradMeta& m = meta_of(snapshot);
          m.grad_fn = e.function;
          m.output_nr = e.input_nr;
          snapshot.impl()->requires_grad = true;
        }
        s.replace(snapshot);
      }
  return true;
}

void end_inplace(const Tensor& self, const Tensor& value, const char* op, const SourceLoc& loc) {
  rebase(self, gradient_edge(value), loc);
}

void end_copy(const Tensor& self, const Tensor& src, const SourceLoc& loc) {
  // self's old value gets no gradient; src gets self's, summed over the
  // broadcast and cast back (fit_gradient against src).
  auto n = make_pooled<OpGrad>("CopyBackwards", pass_b);
  n->add_next_edge(gradient_edge(src));
  n->add_input_metadata(self);
  n->set_where(loc);
  rebase(self, {n, 0}, loc);
}

void end_fill(const Tensor& self, const SourceLoc& loc) {
  if (self.impl()->view_base) return rebase(self, {}, loc);
  auto n = make_pooled<OpGrad>("FillBackward0", none_b);
  n->add_next_edge(gradient_edge(self));
  n->add_input_metadata(self);
  n->set_where(loc);
  rebase(self, {n, 0}, loc);
}

Tensor with_requires_grad(Tensor t, const TensorOptions& o, const char* op, const SourceLoc& loc) {
  if (!o.requires_grad()) return t;
  LOOM_CHECK(is_floating_point(t.dtype()), op, loc,
             "only tensors of floating point dtype can require gradients, got ", describe(t));
  t.requires_grad_(true, loc);
  return t;
}

}  // namespace grad

}  // namespace loom::detail
