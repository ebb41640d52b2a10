// Conv2d and its two gradients (ir/ops.def): the sizes of one call, read
// from its node. This is the one description every backend and the API
// use (runtime/reference/eval_conv.cpp, kernels/cpu/conv.cpp,
// kernels/cuda/library.cpp's plan, api/src/nn/conv.cpp), so they cannot
// disagree about which input holds what.
//
//   Conv2d            (x [N,C,H,W], w [O,C/G,KH,KW])          -> [N,O,OH,OW]
//   Conv2dGradInput   (dout [N,O,OH,OW], w [O,C/G,KH,KW])     -> dx [N,C,H,W]
//   Conv2dGradWeight  (x [N,C,H,W], dout [N,O,OH,OW])         -> [S,O,C/G,KH,KW]
//
// attr = (stride h, stride w, padding h, padding w, dilation h, dilation w,
// groups, splits). Conv2dGradWeight's value is S partial weight gradients in
// ir::conv_acc: split s sums the samples [s*N/S, (s+1)*N/S), so a GPU can
// spread a small weight gradient over many blocks and stay deterministic;
// the caller sums over dim 0. The other two have S = 1 and the inputs' dtype.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "ir/node.h"

namespace loom::ir {

// The dtype Conv2dGradWeight's partial sums are kept in.
constexpr ScalarType conv_acc(ScalarType t) { return t == kDouble ? kDouble : kFloat; }

inline constexpr int kConvAttrs = 8;

struct ConvGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t o = 0, kh = 0, kw = 0;       // weight (o output channels, C/G input channels each)
  int64_t oh = 0, ow = 0;              // output plane
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1, splits = 1;

  int64_t cg() const { return c / groups; }  // input channels per group
  int64_t og() const { return o / groups; }  // output channels per group
  // Samples [split_begin(s), split_begin(s + 1)) make Conv2dGradWeight's split s.
  int64_t split_begin(int64_t s) const { return s * n / splits; }
  // Output size along one dim, as PyTorch computes it.
  static int64_t out_size(int64_t in, int64_t pad, int64_t dil, int64_t k, int64_t stride) {
    return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
  }
  void set_attrs(const Attrs& a) {
    stride_h = a[0], stride_w = a[1], pad_h = a[2], pad_w = a[3], dil_h = a[4], dil_w = a[5], groups = a[6], splits = a[7];
  }
  Attrs attrs() const {
    const int64_t a[kConvAttrs] = {stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, splits};
    return Attrs(a, kConvAttrs);
  }
  // Flops of the one product each of the three computes.
  double flops() const { return 2.0 * double(n) * double(o) * double(oh) * double(ow) * double(cg()) * double(kh * kw); }
};

// The geometry of a Conv2d, Conv2dGradInput or Conv2dGradWeight call from
// its two input shapes, output shape and attributes. Returns an empty
// string when they agree, else what is wrong (the caller names the node).
inline std::string conv_geometry(Op op, const Dims& in0, const Dims& in1, const Dims& out, const Attrs& attr,
                                 ConvGeometry* g) {
  if (attr.n != kConvAttrs) return "expects 8 attributes (stride, padding, dilation, groups, splits)";
  if (in0.n != 4 || in1.n != 4) return "expects 4-D inputs";
  g->set_attrs(attr);
  const Dims& x = op == Op::Conv2dGradInput ? out : in0;
  const Dims& dout = op == Op::Conv2d ? out : op == Op::Conv2dGradInput ? in0 : in1;
  g->n = x[0], g->c = x[1], g->h = x[2], g->w = x[3];
  g->o = dout[1], g->oh = dout[2], g->ow = dout[3];
  if (op == Op::Conv2dGradWeight) {
    if (out.n != 5) return "expects a 5-D [splits, O, C/G, KH, KW] output";
    g->kh = out[3], g->kw = out[4];
    if (out[0] != g->splits || out[1] != g->o || out[2] * g->groups != g->c) return "has an output that is not [splits, O, C/G, KH, KW]";
  } else {
    if (out.n != 4) return "expects a 4-D output";
    g->kh = in1[2], g->kw = in1[3];
    if (in1[0] != g->o || in1[1] * g->groups != g->c) return "has a weight that is not [O, C/G, KH, KW]";
  }
  if (g->stride_h < 1 || g->stride_w < 1 || g->dil_h < 1 || g->dil_w < 1 || g->pad_h < 0 || g->pad_w < 0 || g->groups < 1)
    return "has a stride or dilation under 1, a negative padding or no groups";
  if (g->c % g->groups != 0 || g->o % g->groups != 0) return "has channels not divisible by its groups";
  if (g->splits < 1 || (g->splits > 1 && op != Op::Conv2dGradWeight) || g->splits > std::max<int64_t>(g->n, 1))
    return "has a split count outside [1, N] (or splits on a kernel other than the weight gradient)";
  if (dout[0] != g->n || g->oh != ConvGeometry::out_size(g->h, g->pad_h, g->dil_h, g->kh, g->stride_h) ||
      g->ow != ConvGeometry::out_size(g->w, g->pad_w, g->dil_w, g->kw, g->stride_w))
    return "has an output plane that does not follow from the input, kernel, stride, padding and dilation";
  return {};
}

}  // namespace loom::ir
