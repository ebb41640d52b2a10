// nn::functional: activations, dropout, layer_norm, conv2d (the fused
// Conv2d op of api/src/nn/conv.cpp, or im2col and a product) and max_pool2d
// (a max over the window's shifted views). All but the fused convolution
// are compositions of differentiable loom ops: their gradients come from the
// ops' rules.
#include <loom/nn/functional.h>

#include <limits>

#include "api/src/nn/shared.h"
#include "api/src/autocast.h"
#include "api/src/nn/conv.h"
#include "api/src/record.h"

namespace loom::nn::functional {

using detail::describe;

Tensor relu(const Tensor& x, SourceLoc loc) { return loom::relu(x, loc); }
Tensor gelu(const Tensor& x, const GELUFuncOptions& o, SourceLoc loc) { return loom::gelu(x, o.approximate(), loc); }
Tensor tanh(const Tensor& x, SourceLoc loc) { return loom::tanh(x, loc); }
Tensor sigmoid(const Tensor& x, SourceLoc loc) { return loom::sigmoid(x, loc); }
Tensor silu(const Tensor& x, SourceLoc loc) { return loom::silu(x, loc); }
Tensor softmax(const Tensor& x, int64_t dim, SourceLoc loc) { return loom::softmax(x, dim, std::nullopt, loc); }
Tensor log_softmax(const Tensor& x, int64_t dim, SourceLoc loc) { return loom::log_softmax(x, dim, std::nullopt, loc); }
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, SourceLoc loc) {
  return loom::linear(x, weight, bias, loc);
}
Tensor embedding(const Tensor& indices, const Tensor& weight, SourceLoc loc) {
  return loom::embedding(weight, indices, loc);
}

Tensor dropout(const Tensor& x, const DropoutFuncOptions& o, SourceLoc loc) {
  detail::impl_of(x, "dropout", loc);
  LOOM_CHECK(o.p() >= 0 && o.p() <= 1, "dropout", loc, "dropout probability has to be between 0 and 1, but got ", o.p());
  if (!o.training() || o.p() == 0) return x;
  if (o.p() == 1) return x.mul(0.0, loc);
  LOOM_CHECK(x.is_floating_point(), "dropout", loc, "expected a floating-point tensor, got ", describe(x));
  Tensor keep = rand(x.sizes(), TensorOptions(x.dtype()).device(x.device()), loc).ge(o.p(), loc).to(x.dtype(), loc);
  return x.mul(keep, loc).mul(1.0 / (1.0 - o.p()), loc);
}

Tensor layer_norm(const Tensor& x, const LayerNormFuncOptions& o, SourceLoc loc) {
  detail::impl_of(x, "layer_norm", loc);
  if (detail::autocast::wants_float(x)) return layer_norm(x.to(kFloat, loc), o, loc);
  const auto& shape = o.normalized_shape();
  const int64_t k = static_cast<int64_t>(shape.size());
  bool ok = k >= 1 && x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(x.dim() - k + i) == shape[i];
  LOOM_CHECK(ok, "layer_norm", loc, "normalized_shape ", IntArrayRef(shape), " must match the trailing dims of the input ",
             describe(x));
  if (is_reduced_floating_point(x.dtype())) {  // normalized in float32, rounded once (PyTorch's acc_type)
    LayerNormFuncOptions f = o;
    if (o.weight().defined()) f.weight(o.weight().to(kFloat, loc));
    if (o.bias().defined()) f.bias(o.bias().to(kFloat, loc));
    return layer_norm(x.to(kFloat, loc), f, loc).to(x.dtype(), loc);
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < k; ++i) dims.push_back(x.dim() - k + i);
  // Mean and biased variance, as PyTorch: y = (x - mean) / sqrt(var + eps) * weight + bias.
  return shared::normalize(x, dims, o.eps(), o.weight(), o.bias(), "NativeLayerNormBackward0", loc).y;
}

namespace {

// x [N, C, H, W] with `pad` elements of `value` on each side of H and W.
Tensor pad2d(const Tensor& x, Pair pad, double value, const SourceLoc& loc) {
  if (pad.h == 0 && pad.w == 0) return x;
  const TensorOptions opts = TensorOptions(x.dtype()).device(x.device());
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  Tensor r = x;
  if (pad.w > 0) {
    Tensor side = full({n, c, h, pad.w}, value, opts, loc);
    r = cat({side, r, side}, 3, loc);
  }
  if (pad.h > 0) {
    Tensor side = full({n, c, pad.h, w + 2 * pad.w}, value, opts, loc);
    r = cat({side, r, side}, 2, loc);
  }
  return r;
}

struct Windows {
  int64_t out_h, out_w;
  std::vector<Tensor> views;  // one [N, C, out_h, out_w] view per kernel position, row-major
};

// The input under each kernel position: strided views of the padded input.
Windows windows(const Tensor& padded, Pair kernel, Pair stride, Pair dilation, const char* op, const SourceLoc& loc) {
  const int64_t h = padded.size(2), w = padded.size(3);
  const int64_t span_h = dilation.h * (kernel.h - 1) + 1, span_w = dilation.w * (kernel.w - 1) + 1;
  LOOM_CHECK(h >= span_h && w >= span_w, op, loc, "the kernel (", kernel.h, "x", kernel.w, ", dilation ", dilation.h,
             "x", dilation.w, ") is larger than the padded input (", h, "x", w, ")");
  Windows win{(h - span_h) / stride.h + 1, (w - span_w) / stride.w + 1, {}};
  for (int64_t i = 0; i < kernel.h; ++i)
    for (int64_t j = 0; j < kernel.w; ++j) {
      const int64_t r0 = i * dilation.h, c0 = j * dilation.w;
      win.views.push_back(padded.slice(2, r0, r0 + stride.h * (win.out_h - 1) + 1, stride.h, loc)
                              .slice(3, c0, c0 + stride.w * (win.out_w - 1) + 1, stride.w, loc));
    }
  return win;
}

void check_pair(Pair p, int64_t min, const char* what, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(p.h >= min && p.w >= min, op, loc, what, " must be at least ", min, ", got [", p.h, ", ", p.w, "]");
}

// [C, H, W] inputs are a batch of one.
Tensor batched(const Tensor& x, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(x.dim() == 3 || x.dim() == 4, op, loc, "expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got ",
             describe(x));
  return x.dim() == 3 ? x.unsqueeze(0, loc) : x;
}

}  // namespace

namespace {
// conv2d as im2col and one product a group: [N, G, Cg*kH*kW, L] columns
// against the weight as [G, Og, Cg*kH*kW]. The path where the fused op does
// not apply (backends::fused_conv_enabled() off, or mixed dtypes).
Tensor written_out_conv2d(const Tensor& x, const Tensor& weight, const Conv2dFuncOptions& o, const SourceLoc& loc) {
  const int64_t n = x.size(0), c = x.size(1), out_c = weight.size(0), groups = o.groups();
  const Pair kernel{weight.size(2), weight.size(3)};
  Windows win = windows(pad2d(x, o.padding(), 0.0, loc), kernel, o.stride(), o.dilation(), "conv2d", loc);
  const int64_t l = win.out_h * win.out_w;
  Tensor cols = stack(win.views, 2, loc).reshape({n, groups, c / groups * kernel.h * kernel.w, l}, loc);
  Tensor out = matmul(weight.reshape({groups, out_c / groups, -1}, loc), cols, loc);  // [N, G, Og, L]
  return out.reshape({n, out_c, win.out_h, win.out_w}, loc);
}
}  // namespace

Tensor conv2d(const Tensor& input_in, const Tensor& weight_in, const Conv2dFuncOptions& o_in, SourceLoc loc) {
  detail::impl_of(input_in, "conv2d", loc);
  detail::impl_of(weight_in, "conv2d", loc);
  const Tensor input = detail::autocast::lower(input_in, loc), weight = detail::autocast::lower(weight_in, loc);
  Conv2dFuncOptions o = o_in;
  if (o.bias().defined()) o.bias(detail::autocast::lower(o.bias(), loc));
  Tensor x = batched(input, "conv2d", loc);
  const int64_t groups = o.groups();
  LOOM_CHECK(groups >= 1 && x.size(1) % groups == 0, "conv2d", loc, "groups must be positive and divide the input's ",
             x.size(1), " channels, got ", groups);
  LOOM_CHECK(weight.dim() == 4 && weight.size(1) * groups == x.size(1) && weight.size(0) % groups == 0, "conv2d", loc,
             "expected weight [out_channels, in_channels / groups, kH, kW] with in_channels = ", x.size(1), " (input ",
             describe(input), ") and ", groups, " group(s), got ", describe(weight));
  check_pair(o.stride(), 1, "stride", "conv2d", loc);
  check_pair(o.dilation(), 1, "dilation", "conv2d", loc);
  check_pair(o.padding(), 0, "padding", "conv2d", loc);
  const Pair kernel{weight.size(2), weight.size(3)}, pad = o.padding(), dil = o.dilation();
  const int64_t span_h = dil.h * (kernel.h - 1) + 1, span_w = dil.w * (kernel.w - 1) + 1;
  LOOM_CHECK(x.size(2) + 2 * pad.h >= span_h && x.size(3) + 2 * pad.w >= span_w, "conv2d", loc, "the kernel (",
             kernel.h, "x", kernel.w, ", dilation ", dil.h, "x", dil.w, ") is larger than the padded input (",
             x.size(2) + 2 * pad.h, "x", x.size(3) + 2 * pad.w, ")");
  const int64_t out_c = weight.size(0);
  ir::ConvGeometry attrs;
  attrs.stride_h = o.stride().h, attrs.stride_w = o.stride().w, attrs.pad_h = pad.h, attrs.pad_w = pad.w;
  attrs.dil_h = dil.h, attrs.dil_w = dil.w, attrs.groups = groups;
  Tensor out = detail::fused_conv_applies(x, weight, attrs) ? detail::fused_conv2d(x, weight, attrs, loc)
                                                            : written_out_conv2d(x, weight, o, loc);
  if (o.bias().defined()) out = out.add(o.bias().view({1, out_c, 1, 1}, loc), 1, loc);
  return input.dim() == 3 ? out.squeeze(0, loc) : out;
}

namespace {
// max_pool2d's windows over the padded input (its -inf padding, and more
// at the end in ceil mode), shared by max_pool2d and its indices.
Windows max_pool_windows(const Tensor& input, const MaxPool2dFuncOptions& o, const SourceLoc& loc) {
  detail::impl_of(input, "max_pool2d", loc);
  Tensor x = batched(input, "max_pool2d", loc);
  const Pair kernel = o.kernel_size(), stride = o.stride().value_or(kernel), pad = o.padding(), dil = o.dilation();
  check_pair(kernel, 1, "kernel_size", "max_pool2d", loc);
  check_pair(stride, 1, "stride", "max_pool2d", loc);
  check_pair(dil, 1, "dilation", "max_pool2d", loc);
  const int64_t span_h = dil.h * (kernel.h - 1) + 1, span_w = dil.w * (kernel.w - 1) + 1;
  LOOM_CHECK(pad.h >= 0 && pad.w >= 0 && 2 * pad.h <= span_h && 2 * pad.w <= span_w, "max_pool2d", loc,
             "padding should be at most half of the effective kernel size, got padding [", pad.h, ", ", pad.w,
             "], kernel [", kernel.h, ", ", kernel.w, "] and dilation [", dil.h, ", ", dil.w, "]");
  const double lowest = -std::numeric_limits<double>::infinity();
  Tensor padded = pad2d(x, pad, lowest, loc);
  if (o.ceil_mode()) {
    // PyTorch's output size: rounded up, less a last window that would
    // start past the input and its left padding. The windows past the
    // padded input read -inf.
    auto out_size = [](int64_t in, int64_t p, int64_t span, int64_t s) {
      int64_t out = (in + 2 * p - span + s - 1) / s + 1;
      if ((out - 1) * s >= in + p) --out;
      return out;
    };
    const int64_t oh = out_size(x.size(2), pad.h, span_h, stride.h), ow = out_size(x.size(3), pad.w, span_w, stride.w);
    const int64_t extra_h = std::max<int64_t>(0, (oh - 1) * stride.h + span_h - padded.size(2));
    const int64_t extra_w = std::max<int64_t>(0, (ow - 1) * stride.w + span_w - padded.size(3));
    const TensorOptions opts = TensorOptions(x.dtype()).device(x.device());
    if (extra_w > 0)
      padded = cat({padded, full({padded.size(0), padded.size(1), padded.size(2), extra_w}, lowest, opts, loc)}, 3, loc);
    if (extra_h > 0)
      padded = cat({padded, full({padded.size(0), padded.size(1), extra_h, padded.size(3)}, lowest, opts, loc)}, 2, loc);
  }
  return windows(padded, kernel, stride, dil, "max_pool2d", loc);
}
}  // namespace

Tensor max_pool2d(const Tensor& input, const MaxPool2dFuncOptions& o, SourceLoc loc) {
  Windows win = max_pool_windows(input, o, loc);
  Tensor out = stack(win.views, 0, loc).amax({0}, false, loc);
  return input.dim() == 3 ? out.squeeze(0, loc) : out;
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const MaxPool2dFuncOptions& o, SourceLoc loc) {
  Windows win = max_pool_windows(input, o, loc);
  const Tensor stacked = stack(win.views, 0, loc);
  Tensor out = stacked.amax({0}, false, loc);
  // The first maximum's window position k, as (u, v) = (k / kW, k % kW),
  // made a flat index into the input plane: (i s - p + u d) W + (j s - p + v d).
  const Pair kernel = o.kernel_size(), stride = o.stride().value_or(kernel), pad = o.padding(), dil = o.dilation();
  const int64_t width = input.size(-1);
  const TensorOptions longs = TensorOptions(kLong).device(input.device());
  const Tensor k = stacked.argmax(0, false, loc);
  const Tensor v = k.remainder(kernel.w, loc), u = k.sub(v, 1, loc).div(kernel.w, loc).to(kLong, loc);
  const Tensor rows = arange(0, win.out_h, longs, loc).mul(stride.h, loc).sub(pad.h, 1, loc).unsqueeze(1, loc);
  const Tensor cols = arange(0, win.out_w, longs, loc).mul(stride.w, loc).sub(pad.w, 1, loc);
  Tensor index = rows.add(u.mul(dil.h, loc), 1, loc).mul(width, loc).add(cols.add(v.mul(dil.w, loc), 1, loc), 1, loc);
  if (input.dim() == 3) out = out.squeeze(0, loc), index = index.squeeze(0, loc);
  return {out, index};
}

Tensor avg_pool2d(const Tensor& input, const AvgPool2dFuncOptions& o, SourceLoc loc) {
  detail::impl_of(input, "avg_pool2d", loc);
  Tensor x = batched(input, "avg_pool2d", loc);
  const Pair kernel = o.kernel_size(), stride = o.stride().value_or(kernel), pad = o.padding();
  check_pair(kernel, 1, "kernel_size", "avg_pool2d", loc);
  check_pair(stride, 1, "stride", "avg_pool2d", loc);
  LOOM_CHECK(pad.h >= 0 && pad.w >= 0 && 2 * pad.h <= kernel.h && 2 * pad.w <= kernel.w, "avg_pool2d", loc,
             "pad should be at most half of the kernel size, got padding [", pad.h, ", ", pad.w, "] and kernel [",
             kernel.h, ", ", kernel.w, "]");
  if (o.divisor_override()) LOOM_CHECK(*o.divisor_override() != 0, "avg_pool2d", loc, "divisor must be not zero");
  const int64_t h = x.size(2), w = x.size(3);
  // PyTorch's output size (as max_pool2d's) and per-window divisor.
  auto out_size = [&](int64_t in, int64_t k, int64_t p, int64_t s) {
    const int64_t num = in + 2 * p - k;
    int64_t out = (o.ceil_mode() ? (num + s - 1) / s : num / s) + 1;
    if (o.ceil_mode() && (out - 1) * s >= in + p) --out;
    return out;
  };
  const int64_t oh = out_size(h, kernel.h, pad.h, stride.h), ow = out_size(w, kernel.w, pad.w, stride.w);
  LOOM_CHECK(oh > 0 && ow > 0, "avg_pool2d", loc, "the kernel is larger than the padded input ", describe(input));
  std::vector<double> divisor(static_cast<size_t>(oh * ow));
  for (int64_t i = 0; i < oh; ++i)
    for (int64_t j = 0; j < ow; ++j) {
      int64_t h0 = i * stride.h - pad.h, w0 = j * stride.w - pad.w;
      int64_t h1 = std::min(h0 + kernel.h, h + pad.h), w1 = std::min(w0 + kernel.w, w + pad.w);
      const int64_t pool = (h1 - h0) * (w1 - w0);
      h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0), h1 = std::min(h1, h), w1 = std::min(w1, w);
      divisor[static_cast<size_t>(i * ow + j)] = o.divisor_override()  ? static_cast<double>(*o.divisor_override())
                                                 : o.count_include_pad() ? static_cast<double>(pool)
                                                                         : static_cast<double>((h1 - h0) * (w1 - w0));
    }
  Tensor padded = pad2d(x, pad, 0.0, loc);
  const int64_t extra_h = std::max<int64_t>(0, (oh - 1) * stride.h + kernel.h - padded.size(2));
  const int64_t extra_w = std::max<int64_t>(0, (ow - 1) * stride.w + kernel.w - padded.size(3));
  const TensorOptions opts = TensorOptions(x.dtype()).device(x.device());
  if (extra_w > 0)
    padded = cat({padded, zeros({padded.size(0), padded.size(1), padded.size(2), extra_w}, opts, loc)}, 3, loc);
  if (extra_h > 0)
    padded = cat({padded, zeros({padded.size(0), padded.size(1), extra_h, padded.size(3)}, opts, loc)}, 2, loc);
  Windows win = windows(padded, kernel, stride, Pair(1), "avg_pool2d", loc);
  Tensor sum = stack(win.views, 0, loc).sum({0}, false, std::nullopt, loc);
  Tensor out = sum.div(tensor(divisor, opts, loc).reshape({oh, ow}, loc), loc);
  return input.dim() == 3 ? out.squeeze(0, loc) : out;
}

namespace {
// Adaptive pooling: output cell (i, j) reduces rows [floor(i H / oh),
// ceil((i + 1) H / oh)) and the same for columns; `reduce` over dims {2, 3}.
template <class Reduce>
Tensor adaptive_pool2d(const Tensor& input, Pair size, const char* op, Reduce reduce, const SourceLoc& loc) {
  detail::impl_of(input, op, loc);
  Tensor x = batched(input, op, loc);
  check_pair(size, 1, "output_size", op, loc);
  const int64_t h = x.size(2), w = x.size(3), oh = size.h, ow = size.w;
  Tensor out;
  if (h % oh == 0 && w % ow == 0) {  // equal windows: one reshape, one reduction
    out = reduce(x.reshape({x.size(0), x.size(1), oh, h / oh, ow, w / ow}, loc), std::vector<int64_t>{3, 5});
  } else {
    std::vector<Tensor> rows;
    for (int64_t i = 0; i < oh; ++i) {
      std::vector<Tensor> cells;
      const int64_t r0 = i * h / oh, r1 = ((i + 1) * h + oh - 1) / oh;
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t c0 = j * w / ow, c1 = ((j + 1) * w + ow - 1) / ow;
        cells.push_back(reduce(x.slice(2, r0, r1, 1, loc).slice(3, c0, c1, 1, loc), std::vector<int64_t>{2, 3}));
      }
      rows.push_back(stack(cells, 2, loc));
    }
    out = stack(rows, 2, loc);
  }
  return input.dim() == 3 ? out.squeeze(0, loc) : out;
}
}  // namespace

Tensor adaptive_avg_pool2d(const Tensor& input, const AdaptiveAvgPool2dFuncOptions& o, SourceLoc loc) {
  return adaptive_pool2d(input, o.output_size(), "adaptive_avg_pool2d",
                         [&](const Tensor& t, const std::vector<int64_t>& dims) { return t.mean(dims, false, loc); },
                         loc);
}

Tensor adaptive_max_pool2d(const Tensor& input, const AdaptiveMaxPool2dFuncOptions& o, SourceLoc loc) {
  return adaptive_pool2d(input, o.output_size(), "adaptive_max_pool2d",
                         [&](const Tensor& t, const std::vector<int64_t>& dims) { return t.amax(dims, false, loc); },
                         loc);
}

}  // namespace loom::nn::functional
