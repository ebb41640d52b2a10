// Attention, the plainest way: for each query row, every visible key's score
// in double, the softmax, the weighted sum of values; the value is out
// [N,L,Dv] followed by each row's logsumexp [N,L]. Its gradients from the
// same scores, given the logsumexp and delta_i = sum_c dout_ic out_ic:
//   dv_j = sum_i P_ij dout_i,   dS_ij = P_ij (dout_i . v_j - delta_i),
//   dq_i = scale sum_j dS_ij k_j,   dk_j = scale sum_i dS_ij q_i.
// The library kernels tile this with an online softmax (kernels/cpu/
// attention.cpp, kernels/cuda/attention.cu); this is what they are held to.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/reference/eval.h"

namespace loom::runtime::reference {

namespace {

struct Shape {
  int64_t n, l, s, d, dv;
};

// The mask: its code and, where the op has one, its tensor.
struct Mask {
  ir::AttentionMaskCode code;
  ir::AttentionMaskPlanes planes;
  bool visible(int64_t n, int64_t i, int64_t j) const {
    const uint8_t* row = planes.row(planes.plane(n), i);
    return code.visible(i, j) && (!row || row[j]);
  }
};

Shape shape_of(const EvalContext& c) {
  const ir::Dims& q = *c.in[0]->shape;
  const ir::Dims& v = *c.in[2]->shape;
  if (q.n != 3 || c.in[1]->shape->n != 3 || v.n != 3) c.fail("attention expects 3-D q, k and v");
  const bool masked = c.step.attr.n > ir::kAttentionMaskDivisorAttr && c.step.attr[ir::kAttentionMaskDivisorAttr] > 0;
  const size_t want = ir::attention_mask_input(c.step.op == ir::Op::Attention) + (masked ? 1 : 0);
  if (c.in.size() != want) c.fail("attention takes " + std::to_string(want) + " inputs here");
  return {q[0], q[1], v[1], q[2], v[2]};
}

Mask mask_of(const EvalContext& c, const Shape& sh) {
  Mask m{{static_cast<ir::AttentionMask>(c.step.attr[0]), c.scalars.size() > 1 ? c.scalars[1].i : 0}, {}};
  if (!m.code.known()) c.fail("attention: unknown mask kind, or a sliding window under 1");
  if (c.step.attr.n <= ir::kAttentionMaskDivisorAttr || c.step.attr[ir::kAttentionMaskDivisorAttr] <= 0) return m;
  const ir::Dims& p = *c.in.back()->shape;
  if (c.in.back()->dtype != ScalarType::Bool || p.n != 3 || p[0] < 1 || (p[1] != 1 && p[1] != sh.l) || p[2] != sh.s)
    c.fail("attention's mask must be bool [P, 1 or L, S]");
  m.planes = {c.in.back()->as<uint8_t>(), p[0], p[1], p[2], c.step.attr[ir::kAttentionMaskDivisorAttr]};
  return m;
}

// Scores of query row i against every key (masked: -inf), and their max.
template <class T>
double scores(const T* q, const T* k, const Shape& sh, int64_t n, int64_t i, double scale, const Mask& mask,
              std::vector<double>& s) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < sh.s; ++j) {
    if (!mask.visible(n, i, j)) {
      s[static_cast<size_t>(j)] = -std::numeric_limits<double>::infinity();
      continue;
    }
    double dot = 0;
    for (int64_t c = 0; c < sh.d; ++c)
      dot += static_cast<double>(q[(n * sh.l + i) * sh.d + c]) * static_cast<double>(k[(n * sh.s + j) * sh.d + c]);
    s[static_cast<size_t>(j)] = dot * scale;
    m = std::max(m, s[static_cast<size_t>(j)]);
  }
  return m;
}

template <class T, class A>
void forward(const EvalContext& c, const Shape& sh, double scale, const Mask& mask) {
  const T *q = c.in[0]->as<T>(), *k = c.in[1]->as<T>(), *v = c.in[2]->as<T>();
  A* out = static_cast<A*>(c.out);
  A* lse = out + sh.n * sh.l * sh.dv;
  std::vector<double> s(static_cast<size_t>(sh.s)), acc(static_cast<size_t>(sh.dv));
  for (int64_t n = 0; n < sh.n; ++n)
    for (int64_t i = 0; i < sh.l; ++i) {
      const double m = scores(q, k, sh, n, i, scale, mask, s);
      A* row = out + (n * sh.l + i) * sh.dv;
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0;
      if (m != -std::numeric_limits<double>::infinity())
        for (int64_t j = 0; j < sh.s; ++j) {
          const double p = std::exp(s[static_cast<size_t>(j)] - m);
          sum += p;
          for (int64_t e = 0; e < sh.dv; ++e) acc[static_cast<size_t>(e)] += p * static_cast<double>(v[(n * sh.s + j) * sh.dv + e]);
        }
      for (int64_t e = 0; e < sh.dv; ++e) row[e] = static_cast<A>(sum > 0 ? acc[static_cast<size_t>(e)] / sum : 0.0);
      lse[n * sh.l + i] = static_cast<A>(sum > 0 ? m + std::log(sum) : -std::numeric_limits<double>::infinity());
    }
}

template <class T, class A>
void backward(const EvalContext& c, const Shape& sh, double scale, const Mask& mask, bool grad_q) {
  const T *q = c.in[0]->as<T>(), *k = c.in[1]->as<T>(), *v = c.in[2]->as<T>(), *dout = c.in[3]->as<T>();
  const A *lse = c.in[4]->as<A>(), *delta = c.in[5]->as<A>();
  const int64_t width = grad_q ? sh.d : sh.d + sh.dv, rows = grad_q ? sh.l : sh.s;
  std::vector<double> g(static_cast<size_t>(sh.n * rows * width), 0.0), s(static_cast<size_t>(sh.s));
  for (int64_t n = 0; n < sh.n; ++n)
    for (int64_t i = 0; i < sh.l; ++i) {
      const double li = static_cast<double>(lse[n * sh.l + i]), di = static_cast<double>(delta[n * sh.l + i]);
      if (li == -std::numeric_limits<double>::infinity()) continue;  // a row that saw no key
      const T* go = dout + (n * sh.l + i) * sh.dv;
      scores(q, k, sh, n, i, scale, mask, s);
      for (int64_t j = 0; j < sh.s; ++j) {
        if (!mask.visible(n, i, j)) continue;
        const double p = std::exp(s[static_cast<size_t>(j)] - li);
        double dp = 0;
        for (int64_t e = 0; e < sh.dv; ++e) dp += static_cast<double>(go[e]) * static_cast<double>(v[(n * sh.s + j) * sh.dv + e]);
        const double ds = p * (dp - di) * scale;
        if (grad_q) {
          double* dq = &g[static_cast<size_t>((n * sh.l + i) * width)];
          for (int64_t e = 0; e < sh.d; ++e) dq[e] += ds * static_cast<double>(k[(n * sh.s + j) * sh.d + e]);
        } else {
          double* dkv = &g[static_cast<size_t>((n * sh.s + j) * width)];
          for (int64_t e = 0; e < sh.d; ++e) dkv[e] += ds * static_cast<double>(q[(n * sh.l + i) * sh.d + e]);
          for (int64_t e = 0; e < sh.dv; ++e) dkv[sh.d + e] += p * static_cast<double>(go[e]);
        }
      }
    }
  A* out = static_cast<A*>(c.out);
  for (size_t x = 0; x < g.size(); ++x) out[x] = static_cast<A>(g[x]);
}

}  // namespace

void eval_attention(const EvalContext& c) {
  const Shape sh = shape_of(c);
  const double scale = c.scalars.empty() ? 0.0 : c.scalars[0].f;
  const Mask mask = mask_of(c, sh);
  dispatch_dtype(c.in[0]->dtype, [&]<class T>() {
    if constexpr (!is_real_v<T>) {
      c.fail("attention needs floating-point q, k and v");
    } else {
      using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
      switch (c.step.op) {
        case ir::Op::Attention: return forward<T, A>(c, sh, scale, mask);
        case ir::Op::AttentionGradQ: return backward<T, A>(c, sh, scale, mask, true);
        case ir::Op::AttentionGradKV: return backward<T, A>(c, sh, scale, mask, false);
        default: c.fail("not an attention op");
      }
    }
  });
}

}  // namespace loom::runtime::reference
