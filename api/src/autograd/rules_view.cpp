// Gradient rules of the views (api/src/ops_view.cpp). A view records no
// node in the forward graph, and its gradient is a view or a placement
// back into the input's shape: reshape back, permute back, sum over an
// expansion (the engine does it), or write into zeros at a slice.
#include <loom/functions.h>

#include "api/src/autograd/hooks.h"
#include "api/src/autograd/node.h"
#include "api/src/record.h"

namespace loom::detail::grad {

namespace {

using V = autograd::variable_list;

// node.shape: the input's shape; node.ints: the view op's arguments.
V reshape_b(const OpGrad& n, const Tensor& g) { return {g.reshape(to_ref(n.shape))}; }
V permute_b(const OpGrad& n, const Tensor& g) {
  std::vector<int64_t> inverse(n.ints.size());
  for (size_t i = 0; i < n.ints.size(); ++i) inverse[n.ints[i]] = static_cast<int64_t>(i);
  return {g.permute(inverse)};
}
V transpose_b(const OpGrad& n, const Tensor& g) { return {g.transpose(n.ints[0], n.ints[1])}; }
V expand_b(const OpGrad&, const Tensor& g) { return {g}; }
Tensor zeros_of(const OpGrad& n, const Tensor& g) {
  return zeros(to_ref(n.shape), TensorOptions(g.dtype()).device(g.device()));
}
// node.ints: (dim, start, end, step), normalized. A contiguous slice's
// gradient is g placed back at its positions and zeros elsewhere, written
// as an elementwise expression (each position gathers g at its index within
// the slice where it lies inside it): it fuses into what reads it, such as
// the sum of a split's gradients (one kernel for q, k and v of a fused
// projection), where zeros and a strided write would be a copy of the whole
// shape per slice. A strided slice keeps that form.
V slice_b(const OpGrad& n, const Tensor& g) {
  const int64_t d = n.ints[0], start = n.ints[1], step = n.ints[3];
  if (step != 1 || g.numel() == 0) {
    Tensor z = zeros_of(n, g);
    z.slice(d, start, n.ints[2], step).copy_(g);
    return {z};
  }
  const int64_t size = n.shape[static_cast<int>(d)], len = g.size(d);
  std::vector<int64_t> along(static_cast<size_t>(g.dim()), 1);
  along[static_cast<size_t>(d)] = size;
  const Tensor pos = arange(size, TensorOptions(kLong).device(g.device())).sub(start).view(along);
  const Tensor inside = pos.ge(0).logical_and(pos.lt(len));
  const Tensor gathered = g.gather(d, pos.clamp(0, len - 1).expand(to_ref(n.shape)));
  return {where(inside, gathered, Scalar(0))};
}
V select_b(const OpGrad& n, const Tensor& g) {
  Tensor z = zeros_of(n, g);
  z.select(n.ints[0], n.ints[1]).copy_(g);
  return {z};
}

}  // namespace

void view(const ViewRule& rule, const Tensor& x, const Tensor& out, const SourceLoc& loc) {
  using K = ViewRule::Kind;
  const char* name = nullptr;
  Vjp vjp = reshape_b;
  switch (rule.kind) {
    case K::View: name = "ViewBackward0"; break;
    case K::Squeeze: name = "SqueezeBackward0"; break;
    case K::SqueezeDim: name = "SqueezeBackward1"; break;
    case K::Unsqueeze: name = "UnsqueezeBackward0"; break;
    case K::Permute: name = "PermuteBackward0", vjp = permute_b; break;
    case K::Transpose: name = "TransposeBackward0", vjp = transpose_b; break;
    case K::Expand: name = "ExpandBackward0", vjp = expand_b; break;
    case K::Slice: name = "SliceBackward0", vjp = slice_b; break;
    case K::Select: name = "SelectBackward0", vjp = select_b; break;
  }
  auto n = attach(name, vjp, {&x}, out, loc);
  if (!n) return;
  n->shape = shape_of(x);
  switch (rule.kind) {
    case K::Permute:
      for (int64_t d = 0; d < x.dim(); ++d) n->ints.push_back(rule.dims[d]);
      break;
    case K::Transpose: n->ints = ir::Attrs(std::array<int64_t, 2>{rule.a, rule.b}.data(), 2); break;
    case K::Slice: n->ints = ir::Attrs(std::array<int64_t, 4>{rule.a, rule.b, rule.c, rule.d}.data(), 4); break;
    case K::Select: n->ints = ir::Attrs(std::array<int64_t, 2>{rule.a, rule.b}.data(), 2); break;
    default: break;
  }
}

void on_view(const ViewRule& rule, const Tensor& x, const Tensor& out, const SourceLoc& loc) {
  TensorImpl& o = *out.impl();
  const TensorImpl& in = *x.impl();
  o.view_base = in.view_base ? in.view_base : x.impl();
  o.view_version = o.storage->version.load(std::memory_order_relaxed);
  if (needs_grad(x)) [[unlikely]] view(rule, x, out, loc);
}

}  // namespace loom::detail::grad
