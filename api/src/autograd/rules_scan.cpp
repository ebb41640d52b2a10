// Gradient rules of cumsum and cumprod (api/src/ops_scan.cpp). cumsum's
// is the gradient summed from the end: flip, cumsum, flip. cumprod's is
// PyTorch's cumprod_backward, written without a branch on the data so it
// stays one lazy graph: before a row's first zero, the sum from the end of
// g * out divided by x; at the first zero, the same sum with that zero
// replaced by 1 in the products (the product of everything but it); after
// it, zero (every product there still holds the first zero).
#include <loom/functions.h>

#include "api/src/autograd/hooks.h"
#include "api/src/autograd/node.h"
#include "api/src/record.h"

namespace loom::detail::grad {

namespace {

using V = autograd::variable_list;

Tensor cumsum_from_end(const Tensor& t, int64_t d) { return t.flip({d}).cumsum(d).flip({d}); }

// node.ints[0]: dim.
V cumsum_b(const OpGrad& n, const Tensor& g) { return {cumsum_from_end(g, n.ints[0])}; }

// node.ints[0]: dim; saved: x, out.
V cumprod_b(const OpGrad& n, const Tensor& g) {
  const int64_t d = n.ints[0];
  const Tensor x = n.saved(0), out = n.saved(1);
  if (x.numel() == 0) return {g};
  const Tensor zero = x.eq(0);
  const Tensor zeros_so_far = zero.cumsum(d);  // int64
  const Tensor before_zero = zeros_so_far.eq(0);
  const Tensor first_zero = logical_and(zero, zeros_so_far.eq(1));
  const Tensor before = cumsum_from_end(g * out, d) / where(zero, 1.0, x);
  const Tensor without_it = where(first_zero, 1.0, x).cumprod(d);
  const Tensor at = cumsum_from_end(g * without_it, d);
  return {where(before_zero, before, where(first_zero, at, 0.0))};
}

}  // namespace

void scan(ir::ScanKind kind, const Tensor& x, int64_t dim, const Tensor& out, const SourceLoc& loc) {
  const bool sum = kind == ir::ScanKind::Sum;
  if (auto n = attach(sum ? "CumsumBackward0" : "CumprodBackward0", sum ? cumsum_b : cumprod_b, {&x}, out, loc)) {
    n->ints.push_back(dim);
    if (!sum) {
      n->save(x);
      n->save(out, /*is_output=*/true);
    }
  }
}

}  // namespace loom::detail::grad
