// Gradient rules of the matrix products (api/src/ops_linalg.cpp): the
// batched primitive, and mm / addmm, which get one node each (as in
// libtorch) instead of the views and products they are recorded from.
#include <loom/functions.h>

#include <bit>

#include "api/src/autograd/hooks.h"
#include "api/src/autograd/node.h"
#include "api/src/record.h"

namespace loom::detail::grad {

namespace {

using V = autograd::variable_list;

bool is_one(const Scalar& s) { return s.toDouble() == 1.0; }
Tensor scaled(const Tensor& t, const Scalar& s) { return is_one(s) ? t : t * s; }

// a [B,M,K] x b [B,K,N]
V bmm_b(const OpGrad& n, const Tensor& g) {
  return {n.needs(0) ? g.bmm(n.saved(1).transpose(1, 2)) : Tensor(),
          n.needs(1) ? n.saved(0).transpose(1, 2).bmm(g) : Tensor()};
}
// A gradient is computed in its operand's layout, as PyTorch's
// mm_mat1/mat2_backward: for a transposed operand (a linear layer's
// weight.t()) the transposed product is computed, so the weight's gradient
// comes out [out, in], contiguous, and .grad() adopts it without a copy.
bool transposed(const Tensor& m) {
  return m.dim() == 2 && m.size(0) > 1 && m.size(1) > 1 && m.stride(0) == 1 && m.stride(1) == m.size(0);
}
// node.sizes: whether m1 and m2 were transposed views.
Tensor grad_mat1(const OpGrad& n, const Tensor& g) {
  Tensor m2 = n.saved(1);
  return n.sizes[0] ? m2.mm(g.t()).t() : g.mm(m2.t());
}
Tensor grad_mat2(const OpGrad& n, const Tensor& g) {
  Tensor m1 = n.saved(0);
  return n.sizes[1] ? g.t().mm(m1).t() : m1.t().mm(g);
}

V mm_b(const OpGrad& n, const Tensor& g) {
  return {n.needs(0) ? grad_mat1(n, g) : Tensor(), n.needs(1) ? grad_mat2(n, g) : Tensor()};
}
// beta * self + alpha * m1 @ m2; scalar: alpha, ints[0]: beta as bits.
V addmm_b(const OpGrad& n, const Tensor& g) {
  const Scalar alpha = n.scalar;
  const double beta = std::bit_cast<double>(n.ints[0]);
  Tensor gs;
  if (n.needs(0) && beta != 0) gs = beta == 1 ? g : g * beta;
  return {gs, n.needs(1) ? scaled(grad_mat1(n, g), alpha) : Tensor(),
          n.needs(2) ? scaled(grad_mat2(n, g), alpha) : Tensor()};
}

Tensor run_without_grad(Forward fwd) {
  NoGradGuard no_grad;
  return fwd();
}

}  // namespace

void bmm(const Tensor& a, const Tensor& b, const Tensor& out, const SourceLoc& loc) {
  if (auto n = attach("BmmBackward0", bmm_b, {&a, &b}, out, loc)) {
    n->save(needs_grad(b) ? a : Tensor());
    n->save(needs_grad(a) ? b : Tensor());
  }
}

// Saved: the operand each gradient needs (m1 for m2's, m2 for m1's), and
// each operand's layout (which form its own gradient takes).
void save_operands(OpGrad& n, const Tensor& m1, const Tensor& m2) {
  n.save(needs_grad(m2) ? m1 : Tensor());
  n.save(needs_grad(m1) ? m2 : Tensor());
  n.sizes = {transposed(m1), transposed(m2)};
}

Tensor mm(const Tensor& a, const Tensor& b, Forward fwd, const SourceLoc& loc) {
  Tensor out = run_without_grad(fwd);
  if (auto n = attach("MmBackward0", mm_b, {&a, &b}, out, loc)) save_operands(*n, a, b);
  return out;
}

Tensor addmm(const Tensor& self, const Tensor& m1, const Tensor& m2, const Scalar& beta, const Scalar& alpha,
             Forward fwd, const SourceLoc& loc) {
  Tensor out = run_without_grad(fwd);
  if (auto n = attach("AddmmBackward0", addmm_b, {&self, &m1, &m2}, out, loc)) {
    save_operands(*n, m1, m2);
    n->scalar = alpha;
    n->ints.push_back(std::bit_cast<int64_t>(beta.toDouble()));
  }
  return out;
}

}  // namespace loom::detail::grad
