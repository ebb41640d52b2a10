// Gradient rules of the joins and indexing ops (api/src/ops_index.cpp):
// cat splits the gradient back; index_select and gather add it back into
// zeros at the rows they read (scatter_add; a gather of one element per
// line selects instead), scatter_add reads it back.
#include <loom/functions.h>

#include "api/src/autograd/hooks.h"
#include "api/src/autograd/node.h"
#include "api/src/record.h"

namespace loom::detail::grad {

namespace {

using V = autograd::variable_list;

Tensor zeros_shaped(const ir::Dims& shape, const Tensor& like) {
  return zeros(to_ref(shape), TensorOptions(like.dtype()).device(like.device()));
}

// node.ints[0]: dim; node.sizes: each input's size along it (-1: an empty
// 1-D tensor cat skipped).
V cat_b(const OpGrad& n, const Tensor& g) {
  V out;
  int64_t offset = 0;
  for (size_t i = 0; i < n.sizes.size(); ++i) {
    const int64_t s = n.sizes[i];
    if (s < 0) {
      out.push_back(n.needs(i) ? zeros({0}, TensorOptions(g.dtype()).device(g.device())) : Tensor());
      continue;
    }
    out.push_back(n.needs(i) ? g.narrow(n.ints[0], offset, s) : Tensor());
    offset += s;
  }
  return out;
}

// node.ints[0]: dim; node.shape: the input's shape; saved: the 1-D index.
V index_select_b(const OpGrad& n, const Tensor& g) {
  const int64_t d = n.ints[0];
  std::vector<int64_t> along(g.dim(), 1);
  along[d] = -1;
  Tensor index = n.saved(0).to(kLong).reshape(along).expand(g.sizes());
  return {zeros_shaped(n.shape, g).scatter_add(d, index, g), Tensor()};
}

// node.ints[0]: dim; node.shape: the input's shape; saved: the index.
V gather_b(const OpGrad& n, const Tensor& g) {
  const int64_t d = n.ints[0];
  const Tensor& index = n.saved(0);
  // One index per line along d, covering the input's other dims (the
  // target of cross_entropy / nll_loss): nothing is added twice, so the
  // gradient is g where the position along d is the index. A pointwise
  // select fuses into the kernels around it; scatter_add needs zeros, their
  // copy into the result and a library kernel (three launches of W4's step).
  bool one_per_line = index.dim() == n.shape.n && index.size(d) == 1;
  for (int64_t k = 0; one_per_line && k < index.dim(); ++k) one_per_line = k == d || index.size(k) == n.shape[k];
  if (one_per_line) {
    // scatter_add checked the index (a gather whose value nobody reads is
    // gone from the graph): index_check keeps that check, in the kernel.
    const Tensor checked = checked_index(index, n.shape[d], SourceLoc::current());
    // Along the last dim the 1-D arange broadcasts as it is (a view of it
    // would be materialized as a kernel of its own).
    Tensor position = arange(n.shape[d], TensorOptions(kLong).device(g.device()));
    if (d + 1 < n.shape.n) {
      std::vector<int64_t> along(n.shape.n, 1);
      along[d] = n.shape[d];
      position = position.reshape(along);
    }
    return {where(position == checked, g, 0.0), Tensor()};
  }
  return {zeros_shaped(n.shape, g).scatter_add(d, index, g), Tensor()};
}

// node.ints[0]: dim; node.shape: src's shape; saved: the index.
V scatter_add_b(const OpGrad& n, const Tensor& g) {
  Tensor gsrc;
  if (n.needs(2)) {
    Tensor index = n.saved(0);
    gsrc = g.gather(n.ints[0], index);
    // src may be larger than the index: the elements beyond it were not used.
    if (!(gsrc.sizes() == to_ref(n.shape))) {
      Tensor full = zeros_shaped(n.shape, g);
      Tensor region = full;
      for (int64_t k = 0; k < index.dim(); ++k) region = region.narrow(k, 0, index.size(k));
      region.copy_(gsrc);
      gsrc = full;
    }
  }
  return {g, Tensor(), gsrc};
}

}  // namespace

void cat(const std::vector<Tensor>& inputs, int64_t dim, const Tensor& out, const SourceLoc& loc) {
  std::vector<const Tensor*> ptrs;
  bool any = false;
  for (const Tensor& t : inputs) {
    ptrs.push_back(&t);
    any = any || needs_grad(t);
  }
  if (!any) return;
  auto n = attach("CatBackward0", cat_b, ptrs, out, loc);
  if (!n) return;
  n->ints.push_back(dim);
  for (const Tensor& t : inputs) n->sizes.push_back(t.dim() == 1 && t.size(0) == 0 && out.dim() != 1 ? -1 : t.size(dim));
}

void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out, const SourceLoc& loc) {
  if (auto n = attach("IndexSelectBackward0", index_select_b, {&x, &index}, out, loc)) {
    n->ints.push_back(dim);
    n->shape = shape_of(x);
    n->save(index.reshape({-1}));
  }
}

void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out, const SourceLoc& loc) {
  if (auto n = attach("GatherBackward0", gather_b, {&x, &index}, out, loc)) {
    n->ints.push_back(dim);
    n->shape = shape_of(x);
    n->save(index);
  }
}

void scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const Tensor& out,
                 const SourceLoc& loc) {
  if (auto n = attach("ScatterAddBackward0", scatter_add_b, {&x, &index, &src}, out, loc)) {
    n->ints.push_back(dim);
    n->shape = shape_of(src);
    n->save(index);
  }
}

}  // namespace loom::detail::grad
