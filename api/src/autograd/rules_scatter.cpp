// Gradient rules of scatter and scatter_reduce (api/src/ops_scatter.cpp),
// PyTorch's scatter_reduce_backward term by term:
// - assign: self's gradient is zero where src landed, src's is gathered;
// - sum: self's passes, src's is gathered; mean: both over the count;
// - amax/amin: split equally among every value equal to the result;
// - prod: result / value, with a lone zero in a target's src values
//   (or a zero self) handled exactly by recomputing without it; two or
//   more zeros in one target give src a zero gradient (PyTorch's too, which
//   refuses to differentiate that twice);
// and with include_self=false, self's gradient is zero where src landed.
#include <loom/functions.h>

#include "api/src/autograd/hooks.h"
#include "api/src/autograd/node.h"
#include "api/src/record.h"

namespace loom::detail::grad {

namespace {

using V = autograd::variable_list;

// src's gradient (index-shaped) in src's shape: elements beyond the index
// were not read.
Tensor fit_src(const Tensor& g, const ir::Dims& src_shape) {
  if (g.sizes() == to_ref(src_shape)) return g;
  Tensor full = zeros(to_ref(src_shape), TensorOptions(g.dtype()).device(g.device()));
  Tensor region = full;
  for (int64_t k = 0; k < g.dim(); ++k) region = region.narrow(k, 0, g.size(k));
  region.copy_(g);
  return full;
}

// The part of src the index reads.
Tensor src_region(const Tensor& src, const Tensor& index) {
  Tensor r = src;
  for (int64_t k = 0; k < index.dim() && k < src.dim(); ++k) r = r.narrow(k, 0, index.size(k));
  return r;
}

// node.ints: dim, Reduce, include_self; node.shape: src's shape; saved:
// index, then (prod, amax, amin) self, src and the result.
V scatter_reduce_b(const OpGrad& n, const Tensor& g) {
  const int64_t d = n.ints[0];
  const auto r = static_cast<Reduce>(n.ints[1]);
  const bool include_self = n.ints[2] != 0;
  const Tensor index = n.saved(0);
  Tensor gself, gsrc;
  switch (r) {
    case Reduce::Assign:
      gself = g.scatter(d, index, 0);
      gsrc = g.gather(d, index);
      break;
    case Reduce::Sum:
      gself = g;
      gsrc = g.gather(d, index);
      break;
    case Reduce::Mean: {
      Tensor count = scatter_count(g, d, index, include_self, SourceLoc::current());
      gself = g / count;
      gsrc = g.gather(d, index) / count.gather(d, index);
      break;
    }
    case Reduce::Prod: {
      const Tensor self = n.saved(1), src = src_region(n.saved(2), index), result = n.saved(3);
      const char* kind = "prod";
      Tensor masked_self = self.masked_fill(self == 0, 1);
      gself = g * masked_self.scatter_reduce(d, index, src, kind, include_self) / masked_self;
      Tensor src_zero = src == 0;
      Tensor zeros_in_target = zeros_like(self).scatter_add(d, index, src_zero.to(self.dtype())).gather(d, index);
      Tensor single_zero = logical_and(src_zero, zeros_in_target == 1);
      Tensor without_it = self.scatter_reduce(d, index, src.masked_fill(single_zero, 1), kind, include_self);
      gsrc = where(single_zero, (g * without_it).gather(d, index),
                   (g * result).gather(d, index) / src.masked_fill(src_zero, 1));
      break;
    }
    case Reduce::Amax:
    case Reduce::Amin: {
      const Tensor self = n.saved(1), src = src_region(n.saved(2), index), result = n.saved(3);
      Tensor value = result.gather(d, index);
      Tensor self_is = (self == result).to(self.dtype());
      Tensor src_is = (src == value).to(self.dtype());
      Tensor share = g / self_is.scatter_add(d, index, src_is);
      gself = self_is * share;
      gsrc = src_is * share.gather(d, index);
      break;
    }
  }
  if (!include_self) gself = gself.scatter(d, index, 0);
  return {n.needs(0) ? gself : Tensor(), Tensor(), n.needs(2) ? fit_src(gsrc, n.shape) : Tensor()};
}

const char* rule_name(Reduce r) { return r == Reduce::Assign ? "ScatterBackward0" : "ScatterReduceBackward0"; }

}  // namespace

Tensor scatter_count(const Tensor& like, int64_t dim, const Tensor& index, bool include_self, const SourceLoc& loc) {
  const TensorOptions o = TensorOptions(like.dtype()).device(like.device());
  Tensor start = include_self ? ones(like.sizes(), o, loc) : zeros(like.sizes(), o, loc);
  Tensor count = start.scatter_add(dim, index, ones(index.sizes(), o, loc), loc);
  return count.masked_fill(count.eq(0, loc), 1, loc);
}

Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, Reduce r,
                      bool include_self, Forward fwd, const SourceLoc& loc) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fwd();
  }
  if (auto n = attach(rule_name(r), scatter_reduce_b, {&self, &index, &src}, out, loc)) {
    n->ints.push_back(dim);
    n->ints.push_back(static_cast<int64_t>(r));
    n->ints.push_back(include_self ? 1 : 0);
    n->shape = shape_of(src);
    n->save(index);
    if (r == Reduce::Prod || r == Reduce::Amax || r == Reduce::Amin) {
      n->save(self);
      n->save(src);
      n->save(out, true);
    }
  }
  return out;
}

}  // namespace loom::detail::grad
