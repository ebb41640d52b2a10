// The normalization layer, batch, instance and group norm share, with a
// gradient of its own (shared.h). Differentiating the written-out ops
// instead (a mean, a subtraction, a variance, an rsqrt, a product) keeps
// the normalized x for the backward, in float32 (ResNet-18 on an H200,
// bfloat16 autocast: a float32 copy of every activation a batch norm sees),
// and records six or seven passes over it. The rule here recomputes
// x_hat = (x - mean) r from x and the saved per-row mean and r =
// 1/sqrt(var + eps), and needs two sums over the normalized dims:
//   gx   = g weight                      (the gradient at x_hat)
//   dx   = r (gx - mean(gx) - x_hat mean(gx x_hat))
//   dw   = sum of g x_hat over weight's broadcast dims, db = sum of g
// When weight is constant along the normalized dims (batch and instance
// norm: one weight per channel), mean(gx) = weight sum(g) / n and
// mean(gx x_hat) = weight sum(g x_hat) / n, the very sums db and dw need:
// two reductions in all. The rule's ops are differentiable, so a backward
// that is itself differentiated (create_graph) works; there the mean and r
// are recomputed from x with their history.
#include <loom/autograd.h>
#include <loom/functions.h>

#include "api/src/autograd/node.h"
#include "api/src/nn/shared.h"
#include "api/src/record.h"

namespace loom::nn::shared {

namespace {

using V = autograd::variable_list;

// The mean and biased variance over dims (kept), x - mean, 1/sqrt(var + eps).
struct Stats {
  Tensor mean, var, centered, rstd;
};
Stats statistics(const Tensor& x, IntArrayRef dims, double eps, const SourceLoc& loc) {
  Stats st;
  st.mean = x.mean(dims, true, loc);
  st.centered = x.sub(st.mean, 1, loc);
  st.var = st.centered.mul(st.centered, loc).mean(dims, true, loc);
  st.rstd = st.var.add(eps, 1, loc).rsqrt(loc);
  return st;
}

// Whether t (defined) has size 1 along every one of `dims`.
bool constant_along(const Tensor& t, const Tensor& x, IntArrayRef dims) {
  for (int64_t d : dims) {
    const int64_t td = d - (x.dim() - t.dim());  // t's dim under x's dim d (broadcast from the right)
    if (td >= 0 && t.size(td) != 1) return false;
  }
  return true;
}

// saved: x, mean, rstd, weight (or undefined); ints: dims, then eps's bits
// in scalar.
V normalize_b(const detail::OpGrad& node, const Tensor& g) {
  const SourceLoc loc = SourceLoc::current();
  const Tensor x = node.saved(0), w = node.saved(3);
  const std::vector<int64_t> dims(node.ints.begin(), node.ints.end());
  Stats st;
  st.mean = node.saved(1), st.rstd = node.saved(2);
  if (GradMode::is_enabled()) st = statistics(x, dims, node.scalar.toDouble(), loc);  // with history
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  const Tensor xhat = x.sub(st.mean, 1, loc).mul(st.rstd, loc);
  const bool need_x = node.needs(0), need_w = node.needs(1), need_b = node.needs(2);
  Tensor dx, dw, db;
  if (!w.defined() || constant_along(w, x, dims)) {
    const Tensor sum_g = g.sum(dims, true, std::nullopt, loc);
    const Tensor sum_gx = g.mul(xhat, loc).sum(dims, true, std::nullopt, loc);
    if (need_x) {
      const Tensor scale = w.defined() ? st.rstd.mul(w, loc) : st.rstd;
      dx = g.sub(sum_g.div(static_cast<double>(n), loc), 1, loc)
               .sub(xhat.mul(sum_gx.div(static_cast<double>(n), loc), loc), 1, loc)
               .mul(scale, loc);
    }
    if (need_w) dw = sum_gx;  // summed over the rest of weight's broadcast dims by the engine
    if (need_b) db = sum_g;
  } else {
    const Tensor gx = g.mul(w, loc);
    if (need_x)
      dx = gx.sub(gx.mean(dims, true, loc), 1, loc)
               .sub(xhat.mul(gx.mul(xhat, loc).mean(dims, true, loc), loc), 1, loc)
               .mul(st.rstd, loc);
    if (need_w) dw = g.mul(xhat, loc);
    if (need_b) db = g;
  }
  return {dx, dw, db};
}

}  // namespace

Normalized normalize(const Tensor& x, IntArrayRef dims, double eps, const Tensor& weight, const Tensor& bias,
                     const char* grad_name, const SourceLoc& loc) {
  Tensor y;
  Stats st;
  {
    NoGradGuard no_grad;
    st = statistics(x, dims, eps, loc);
    y = st.centered.mul(st.rstd, loc);
    if (weight.defined()) y = y.mul(weight, loc);
    if (bias.defined()) y = y.add(bias, 1, loc);
  }
  if (auto node = detail::attach(grad_name, normalize_b, {&x, &weight, &bias}, y, loc)) {
    node->save(x);
    node->save(st.mean);
    node->save(st.rstd);
    node->save(weight);
    for (int64_t d : dims) node->ints.push_back(d < 0 ? d + x.dim() : d);
    node->scalar = Scalar(eps);
  }
  return {y, st.mean, st.var};
}

}  // namespace loom::nn::shared
