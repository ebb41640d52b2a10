// The fused convolution: conv2d as one Conv2d node (an implicit GEMM on
// every backend: runtime/reference/eval_conv.cpp, kernels/cpu/conv.cpp,
// kernels/cuda/conv.cu), never an im2col tensor in the graph. Its gradients
// are Conv2dGradInput and Conv2dGradWeight nodes (ir/conv.h). The three are
// bilinear, and each one's vector-Jacobian product is made of the other two:
//   y  = conv(x, w)         dx = grad_input(dy, w)      dw = grad_weight(x, dy)
//   dx = grad_input(dy, w)  d(dy) = conv(u, w)          dw = grad_weight(u, dy)
//   dw = grad_weight(x, dy) dx = grad_input(dy, v)      d(dy) = conv(x, v)
// (u, v: the gradients arriving at dx and dw), so every order of
// derivative records the same three ops.
#include "api/src/nn/conv.h"

#include <loom/nn/functional.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "api/src/autograd/node.h"
#include "api/src/record.h"
#include "kernels/cuda/meta_layout.h"
#include "runtime/cuda/context.h"

namespace loom {

namespace backends {
namespace {
std::atomic<bool> g_fused_conv{true};
// On the CPU, im2col and the generated GEMM kernels (jit/llvm/gemm.cpp,
// packed and register-tiled for the machine) measure faster today than the
// library's convolution kernels (W10 at the CPU size on the 2-vCPU Xeon:
// about 390 ms a step against 600, docs/PERFORMANCE.md), so the CPU takes the
// fused op only when asked.
std::atomic<bool> g_fused_conv_cpu{false};
}  // namespace
void enable_fused_conv(bool enabled) { g_fused_conv.store(enabled, std::memory_order_relaxed); }
bool fused_conv_enabled() { return g_fused_conv.load(std::memory_order_relaxed); }
void enable_fused_conv_on_cpu(bool enabled) { g_fused_conv_cpu.store(enabled, std::memory_order_relaxed); }
bool fused_conv_on_cpu_enabled() { return g_fused_conv_cpu.load(std::memory_order_relaxed); }
}  // namespace backends

namespace detail {

namespace {

using V = autograd::variable_list;

ir::Dims dims(std::initializer_list<int64_t> d) { return ir::Dims(d.begin(), d.size()); }

Tensor conv_node(ir::Op op, const Tensor& a, const Tensor& b, ScalarType dtype, const ir::Dims& shape,
                 const ir::ConvGeometry& g, const SourceLoc& loc) {
  auto n = detail::new_node(op, dtype, a.device(), shape, {detail::read(a, loc), detail::read(b, loc)}, loc);
  n->attr = g.attrs();
  return detail::wrap(std::move(n));
}

// How many sample splits the weight gradient takes: on the CPU one per
// core; on a GPU the count that finishes soonest by meta_layout.h's model
// of the kernel (conv::weight_splits), two resident blocks a
// multiprocessor for the 16-bit kernels, one for float32 and float64.
int64_t weight_splits(const ir::ConvGeometry& g, ScalarType dtype, Device device) {
  if (g.n <= 1) return 1;
  // The kernels' grid holds groups * splits in one dim of at most 65535.
  const int64_t most = std::min<int64_t>(g.n, 65535 / g.groups);
  if (!device.is_cuda())
    return std::clamp<int64_t>(static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())), 1, most);
  namespace mc = kernels::cuda::meta_layout::conv;
  const int sms = std::max(runtime::cuda::context(std::max<int>(device.index(), 0)).multiprocessors, 1);
  const int64_t tiles =
      (g.cg() * g.kh * g.kw + mc::kTileM - 1) / mc::kTileM * ((g.og() + mc::kTileN - 1) / mc::kTileN) * g.groups;
  const double partial_bytes =
      static_cast<double>(g.o * g.cg() * g.kh * g.kw) * static_cast<double>(element_size(ir::conv_acc(dtype)));
  return mc::weight_splits(g.n, most, tiles, g.oh * g.ow, partial_bytes,
                           int64_t{sms} * (is_reduced_floating_point(dtype) ? 2 : 1));
}

Tensor forward(const Tensor& x, const Tensor& w, const ir::ConvGeometry& g, const SourceLoc& loc);
Tensor grad_input(const Tensor& dy, const Tensor& w, const ir::ConvGeometry& g, const SourceLoc& loc);
Tensor grad_weight(const Tensor& x, const Tensor& dy, const ir::ConvGeometry& g, const SourceLoc& loc);

// The rules read the geometry from the node's ints (ConvGeometry::attrs)
// and the sizes from the saved tensors.
ir::ConvGeometry geometry_of(const OpGrad& node, const Tensor& x_like, const Tensor& w_like, const Tensor& dy_like) {
  ir::ConvGeometry g;
  g.set_attrs(node.ints);
  g.splits = 1;
  g.n = x_like.size(0), g.c = x_like.size(1), g.h = x_like.size(2), g.w = x_like.size(3);
  g.o = w_like.size(0), g.kh = w_like.size(2), g.kw = w_like.size(3);
  g.oh = dy_like.size(2), g.ow = dy_like.size(3);
  return g;
}

// saved: x, w.
V forward_b(const OpGrad& node, const Tensor& dy) {
  const SourceLoc loc = SourceLoc::current();
  const Tensor x = node.saved(0), w = node.saved(1);
  const ir::ConvGeometry g = geometry_of(node, x, w, dy);
  const Tensor d = dy.to(x.dtype(), loc).contiguous(loc);
  return {node.needs(0) ? grad_input(d, w, g, loc) : Tensor(), node.needs(1) ? grad_weight(x, d, g, loc) : Tensor()};
}
// grad_input(dy, w) -> dx; saved: dy, w; u arrives at dx.
V grad_input_b(const OpGrad& node, const Tensor& u_in) {
  const SourceLoc loc = SourceLoc::current();
  const Tensor dy = node.saved(0), w = node.saved(1), u = u_in.to(dy.dtype(), loc).contiguous(loc);
  const ir::ConvGeometry g = geometry_of(node, u, w, dy);
  return {node.needs(0) ? forward(u, w, g, loc) : Tensor(), node.needs(1) ? grad_weight(u, dy, g, loc) : Tensor()};
}
// grad_weight(x, dy) -> dw; saved: x, dy; v arrives at dw.
V grad_weight_b(const OpGrad& node, const Tensor& v_in) {
  const SourceLoc loc = SourceLoc::current();
  const Tensor x = node.saved(0), dy = node.saved(1), v = v_in.to(x.dtype(), loc).contiguous(loc);
  const ir::ConvGeometry g = geometry_of(node, x, v, dy);
  return {node.needs(0) ? grad_input(dy, v, g, loc) : Tensor(), node.needs(1) ? forward(x, v, g, loc) : Tensor()};
}

// Gives out (one of the three ops of a and b) the rule `vjp`, which reads
// a, b and the geometry's attrs.
void attach_rule(const char* name, detail::Vjp vjp, const Tensor& a, const Tensor& b, const Tensor& out,
                 const ir::ConvGeometry& g, const SourceLoc& loc) {
  if (!GradMode::is_enabled() || !(a.requires_grad() || b.requires_grad())) return;
  if (auto node = detail::attach(name, vjp, {&a, &b}, out, loc)) {
    node->save(a);
    node->save(b);
    node->ints = g.attrs();
  }
}

Tensor forward(const Tensor& x, const Tensor& w, const ir::ConvGeometry& g, const SourceLoc& loc) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = conv_node(ir::Op::Conv2d, x, w, x.dtype(), dims({g.n, g.o, g.oh, g.ow}), g, loc);
  }
  attach_rule("ConvolutionBackward0", forward_b, x, w, y, g, loc);
  return y;
}

Tensor grad_input(const Tensor& dy, const Tensor& w, const ir::ConvGeometry& g, const SourceLoc& loc) {
  Tensor dx;
  {
    NoGradGuard no_grad;
    dx = conv_node(ir::Op::Conv2dGradInput, dy, w, dy.dtype(), dims({g.n, g.c, g.h, g.w}), g, loc);
  }
  attach_rule("ConvolutionBackwardBackward0", grad_input_b, dy, w, dx, g, loc);
  return dx;
}

Tensor grad_weight(const Tensor& x, const Tensor& dy, const ir::ConvGeometry& g_in, const SourceLoc& loc) {
  ir::ConvGeometry g = g_in;
  g.splits = weight_splits(g, x.dtype(), x.device());
  Tensor dw;
  {
    NoGradGuard no_grad;
    const Tensor parts = conv_node(ir::Op::Conv2dGradWeight, x, dy, ir::conv_acc(x.dtype()),
                                   dims({g.splits, g.o, g.cg(), g.kh, g.kw}), g, loc);
    dw = parts.sum({0}, false, std::nullopt, loc).to(x.dtype(), loc);
  }
  g.splits = 1;
  attach_rule("ConvolutionBackwardBackward1", grad_weight_b, x, dy, dw, g, loc);
  return dw;
}

// On a GPU the 16-bit kernels use mma.sync: compute capability 8.0 on.
bool cuda_tensor_cores(const Device& device) {
  return runtime::cuda::context(std::max<int>(device.index(), 0)).sm_major >= 8;
}

}  // namespace

namespace {
// attrs with the sizes of x and w and the output plane they give.
ir::ConvGeometry sized(const Tensor& x, const Tensor& w, const ir::ConvGeometry& attrs) {
  ir::ConvGeometry g = attrs;
  g.n = x.size(0), g.c = x.size(1), g.h = x.size(2), g.w = x.size(3);
  g.o = w.size(0), g.kh = w.size(2), g.kw = w.size(3);
  g.oh = ir::ConvGeometry::out_size(g.h, g.pad_h, g.dil_h, g.kh, g.stride_h);
  g.ow = ir::ConvGeometry::out_size(g.w, g.pad_w, g.dil_w, g.kw, g.stride_w);
  g.splits = 1;
  return g;
}
}  // namespace

bool fused_conv_applies(const Tensor& x, const Tensor& w, const ir::ConvGeometry& attrs) {
  if (!backends::fused_conv_enabled()) return false;
  if (!is_floating_point(x.dtype()) || w.dtype() != x.dtype() || w.device() != x.device()) return false;
  if (x.device().is_cpu() && !backends::fused_conv_on_cpu_enabled()) return false;
  if (x.device().is_cuda()) {
    // The GPU kernels index within a sample and the weight in 32 bits: larger
    // ones are written out (the planner would refuse them).
    const ir::ConvGeometry g = sized(x, w, attrs);
    const int64_t limit = kernels::cuda::meta_layout::conv::kMaxPerSample;
    if (g.c * g.h * g.w >= limit || g.o * g.oh * g.ow >= limit || w.numel() >= limit) return false;
    if (is_reduced_floating_point(x.dtype())) return cuda_tensor_cores(x.device());
  }
  return true;
}

Tensor fused_conv2d(const Tensor& x_in, const Tensor& w_in, const ir::ConvGeometry& attrs, const SourceLoc& loc) {
  // The kernels read whole contiguous buffers (a view is copied here).
  const Tensor x = x_in.contiguous(loc), w = w_in.contiguous(loc);
  return forward(x, w, sized(x, w, attrs), loc);
}

}  // namespace detail

}  // namespace loom
