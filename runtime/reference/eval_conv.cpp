// Conv2d and its gradients, the plainest way: every output element is the
// sum, in double, of its products, each input position checked against the
// padding. The library kernels (kernels/cpu/conv.cpp, kernels/cuda/conv.cu)
// compute the same sums as tiled GEMMs; this is what they are held to.
//   out[n,o,i,j]  = sum_{c,r,s} x[n, g*Cg+c, i*sh-ph+r*dh, j*sw-pw+s*dw] w[o,c,r,s]
//   dx[n,g*Cg+c,h,v] = sum over (o, r, s) whose output row i = (h+ph-r*dh)/sh and
//                   column j = (v+pw-s*dw)/sw are whole and in range of dout[n,o,i,j] w[o,c,r,s]
//   dw[t,o,c,r,s] = sum over the samples n of split t, i, j of dout[n,o,i,j] x[n, g*Cg+c, ...]
// (g = o / Og: the group of output channel o).
#include <vector>

#include "ir/conv.h"
#include "runtime/reference/eval.h"

namespace loom::runtime::reference {

namespace {

template <class T, class A>
void conv(const EvalContext& c, const ir::ConvGeometry& g) {
  const int64_t cg = g.cg(), og = g.og();
  std::vector<double> acc;
  auto x_at = [&](const T* x, int64_t n, int64_t ch, int64_t h, int64_t v) -> double {
    if (h < 0 || h >= g.h || v < 0 || v >= g.w) return 0.0;
    return static_cast<double>(x[((n * g.c + ch) * g.h + h) * g.w + v]);
  };
  switch (c.step.op) {
    case ir::Op::Conv2d: {
      const T *x = c.in[0]->as<T>(), *w = c.in[1]->as<T>();
      T* out = static_cast<T*>(c.out);
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t o = 0; o < g.o; ++o)
          for (int64_t i = 0; i < g.oh; ++i)
            for (int64_t j = 0; j < g.ow; ++j) {
              double sum = 0;
              const int64_t c0 = (o / og) * cg;
              for (int64_t ch = 0; ch < cg; ++ch)
                for (int64_t r = 0; r < g.kh; ++r)
                  for (int64_t s = 0; s < g.kw; ++s)
                    sum += x_at(x, n, c0 + ch, i * g.stride_h - g.pad_h + r * g.dil_h, j * g.stride_w - g.pad_w + s * g.dil_w) *
                           static_cast<double>(w[((o * cg + ch) * g.kh + r) * g.kw + s]);
              out[((n * g.o + o) * g.oh + i) * g.ow + j] = static_cast<T>(sum);
            }
      return;
    }
    case ir::Op::Conv2dGradInput: {
      const T *dout = c.in[0]->as<T>(), *w = c.in[1]->as<T>();
      acc.assign(static_cast<size_t>(g.n * g.c * g.h * g.w), 0.0);
      // Scattered from each output element: the same terms as the gather above.
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t o = 0; o < g.o; ++o)
          for (int64_t i = 0; i < g.oh; ++i)
            for (int64_t j = 0; j < g.ow; ++j) {
              const double d = static_cast<double>(dout[((n * g.o + o) * g.oh + i) * g.ow + j]);
              const int64_t c0 = (o / og) * cg;
              for (int64_t ch = 0; ch < cg; ++ch)
                for (int64_t r = 0; r < g.kh; ++r)
                  for (int64_t s = 0; s < g.kw; ++s) {
                    const int64_t h = i * g.stride_h - g.pad_h + r * g.dil_h, v = j * g.stride_w - g.pad_w + s * g.dil_w;
                    if (h < 0 || h >= g.h || v < 0 || v >= g.w) continue;
                    acc[static_cast<size_t>(((n * g.c + c0 + ch) * g.h + h) * g.w + v)] +=
                        d * static_cast<double>(w[((o * cg + ch) * g.kh + r) * g.kw + s]);
                  }
            }
      T* out = static_cast<T*>(c.out);
      for (size_t e = 0; e < acc.size(); ++e) out[e] = static_cast<T>(acc[e]);
      return;
    }
    case ir::Op::Conv2dGradWeight: {
      const T *x = c.in[0]->as<T>(), *dout = c.in[1]->as<T>();
      A* out = static_cast<A*>(c.out);
      for (int64_t t = 0; t < g.splits; ++t)
        for (int64_t o = 0; o < g.o; ++o)
          for (int64_t ch = 0; ch < cg; ++ch)
            for (int64_t r = 0; r < g.kh; ++r)
              for (int64_t s = 0; s < g.kw; ++s) {
                double sum = 0;
                const int64_t c0 = (o / og) * cg;
                for (int64_t n = g.split_begin(t); n < g.split_begin(t + 1); ++n)
                  for (int64_t i = 0; i < g.oh; ++i)
                    for (int64_t j = 0; j < g.ow; ++j)
                      sum += static_cast<double>(dout[((n * g.o + o) * g.oh + i) * g.ow + j]) *
                             x_at(x, n, c0 + ch, i * g.stride_h - g.pad_h + r * g.dil_h, j * g.stride_w - g.pad_w + s * g.dil_w);
                out[(((t * g.o + o) * cg + ch) * g.kh + r) * g.kw + s] = static_cast<A>(sum);
              }
      return;
    }
    default: c.fail("not a convolution op");
  }
}

}  // namespace

void eval_conv(const EvalContext& c) {
  if (c.in.size() != 2) c.fail("a convolution takes 2 inputs");
  ir::ConvGeometry g;
  const std::string why = ir::conv_geometry(c.step.op, *c.in[0]->shape, *c.in[1]->shape, c.step.shape, c.step.attr, &g);
  if (!why.empty()) c.fail(std::string(ir::op_name(c.step.op)) + " " + why);
  if (c.in[0]->dtype != c.in[1]->dtype) c.fail("a convolution's two inputs differ in dtype");
  dispatch_dtype(c.in[0]->dtype, [&]<class T>() {
    if constexpr (!is_real_v<T>) {
      c.fail("a convolution needs floating-point inputs");
    } else {
      using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
      conv<T, A>(c, g);
    }
  });
}

}  // namespace loom::runtime::reference
