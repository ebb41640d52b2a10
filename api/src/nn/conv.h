// The fused convolution's recording (api/src/nn/conv.cpp), for conv2d and
// everything built on it (conv1d, conv_transpose2d, Conv*d modules).
#pragma once
#include <loom/tensor.h>

#include "ir/conv.h"

namespace loom::detail {

// Whether x [N,C,H,W] and w [O,C/G,KH,KW] take the fused Conv2d op:
// one floating dtype and device, and backends::fused_conv_enabled(); on a
// GPU, bfloat16 and float16 also need compute capability 8.0 (mma.sync); on
// the CPU, backends::fused_conv_on_cpu_enabled() (off by default: slower
// there today than im2col and the generated GEMM).
// `attrs`: stride, padding, dilation and groups; the sizes come from x and w.
bool fused_conv_applies(const Tensor& x, const Tensor& w, const ir::ConvGeometry& attrs);
// One Conv2d node (attributes from `attrs`, sizes from x and w) with its gradient rule: the three conv ops are
// bilinear and each one's gradient is made of the other two, so a backward
// is itself differentiable (create_graph) to any order.
Tensor fused_conv2d(const Tensor& x, const Tensor& w, const ir::ConvGeometry& attrs, const SourceLoc& loc);

}  // namespace loom::detail
