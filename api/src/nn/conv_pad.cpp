// loom/nn/conv_pad.h: Conv1d through conv2d; pad from slices, flips and
// concatenations (its gradient is theirs).
#include <loom/functions.h>
#include <loom/nn/conv_pad.h>
#include <loom/nn/functional.h>
#include <loom/nn/init.h>

#include <cmath>

#include "api/src/record.h"

namespace loom::nn {

namespace functional {

Tensor conv1d(const Tensor& input, const Tensor& weight, const Conv1dFuncOptions& o, SourceLoc loc) {
  detail::impl_of(input, "conv1d", loc), detail::impl_of(weight, "conv1d", loc);
  LOOM_CHECK(input.dim() == 2 || input.dim() == 3, "conv1d", loc, "expected a 2-D [C, L] or 3-D [N, C, L] input, got ",
             detail::describe(input));
  LOOM_CHECK(weight.dim() == 3, "conv1d", loc, "expected a 3-D weight [O, C, k], got ", detail::describe(weight));
  const Tensor x = input.dim() == 2 ? input.unsqueeze(0, loc) : input;
  Tensor y = conv2d(x.unsqueeze(2, loc), weight.unsqueeze(2, loc),
                    Conv2dFuncOptions()
                        .bias(o.bias())
                        .stride(Pair({1, o.stride()}))
                        .padding(Pair({0, o.padding()}))
                        .dilation(Pair({1, o.dilation()}))
                        .groups(o.groups()),
                    loc)
                 .squeeze(2, loc);
  return input.dim() == 2 ? y.squeeze(0, loc) : y;
}

Tensor pad(const Tensor& input, const PadFuncOptions& o, SourceLoc loc) {
  detail::impl_of(input, "pad", loc);
  const std::vector<int64_t>& p = o.pad();
  LOOM_CHECK(p.size() % 2 == 0 && static_cast<int64_t>(p.size()) / 2 <= input.dim(), "pad", loc,
             "padding length must be even and at most twice the input's dims, got ", p.size(), " for ",
             detail::describe(input));
  Tensor x = input;
  for (size_t i = 0; i < p.size() / 2; ++i) {
    const int64_t d = input.dim() - 1 - static_cast<int64_t>(i), lo = p[2 * i], hi = p[2 * i + 1];
    const int64_t n = x.size(d);
    if (lo == 0 && hi == 0) continue;
    std::vector<Tensor> parts;
    auto block = [&](int64_t width) {
      std::vector<int64_t> shape = x.sizes().vec();
      shape[static_cast<size_t>(d)] = width;
      return full(shape, o.value(), TensorOptions(x.dtype()).device(x.device()), loc);
    };
    switch (o.mode()) {
      case kConstant: {
        // Negative pads crop first.
        Tensor core = x.slice(d, std::max<int64_t>(0, -lo), n - std::max<int64_t>(0, -hi), 1, loc);
        if (lo > 0) parts.push_back(block(lo));
        parts.push_back(core);
        if (hi > 0) parts.push_back(block(hi));
        break;
      }
      case kReflect:
        LOOM_CHECK(lo >= 0 && hi >= 0 && lo < n && hi < n, "pad", loc,
                   "reflect padding must be non-negative and below the dim's size ", n, ", got (", lo, ", ", hi, ")");
        if (lo > 0) parts.push_back(x.slice(d, 1, lo + 1, 1, loc).flip({d}, loc));
        parts.push_back(x);
        if (hi > 0) parts.push_back(x.slice(d, n - 1 - hi, n - 1, 1, loc).flip({d}, loc));
        break;
      case kReplicate: {
        LOOM_CHECK(lo >= 0 && hi >= 0 && n > 0, "pad", loc, "replicate padding must be non-negative, got (", lo, ", ",
                   hi, ")");
        auto edge = [&](int64_t at, int64_t width) {
          std::vector<int64_t> shape = x.sizes().vec();
          shape[static_cast<size_t>(d)] = width;
          return x.slice(d, at, at + 1, 1, loc).expand(shape, loc);
        };
        if (lo > 0) parts.push_back(edge(0, lo));
        parts.push_back(x);
        if (hi > 0) parts.push_back(edge(n - 1, hi));
        break;
      }
      case kCircular:
        LOOM_CHECK(lo >= 0 && hi >= 0 && lo <= n && hi <= n, "pad", loc,
                   "circular padding must be non-negative and at most the dim's size ", n, ", got (", lo, ", ", hi, ")");
        if (lo > 0) parts.push_back(x.slice(d, n - lo, n, 1, loc));
        parts.push_back(x);
        if (hi > 0) parts.push_back(x.slice(d, 0, hi, 1, loc));
        break;
    }
    x = parts.size() == 1 ? parts[0] : cat(parts, d, loc);
  }
  return x;
}

namespace {
// x with s - 1 zeros between neighbours along dim d.
Tensor spread(const Tensor& x, int64_t d, int64_t s, const SourceLoc& loc) {
  if (s == 1) return x;
  const int64_t n = x.size(d);
  std::vector<int64_t> gap = x.unsqueeze(d + 1, loc).sizes().vec();
  gap[static_cast<size_t>(d + 1)] = s - 1;
  Tensor both = cat({x.unsqueeze(d + 1, loc), zeros(gap, TensorOptions(x.dtype()).device(x.device()), loc)}, d + 1, loc);
  std::vector<int64_t> merged = x.sizes().vec();
  merged[static_cast<size_t>(d)] = n * s;
  return both.reshape(merged, loc).slice(d, 0, (n - 1) * s + 1, 1, loc);
}
}  // namespace

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const ConvTranspose2dFuncOptions& o, SourceLoc loc) {
  detail::impl_of(input, "conv_transpose2d", loc), detail::impl_of(weight, "conv_transpose2d", loc);
  LOOM_CHECK(input.dim() == 3 || input.dim() == 4, "conv_transpose2d", loc,
             "expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got ", detail::describe(input));
  const Tensor x = input.dim() == 3 ? input.unsqueeze(0, loc) : input;
  const int64_t groups = o.groups();
  LOOM_CHECK(groups >= 1 && x.size(1) % groups == 0, "conv_transpose2d", loc,
             "groups must be positive and divide the input's ", x.size(1), " channels, got ", groups);
  LOOM_CHECK(weight.dim() == 4 && weight.size(0) == x.size(1), "conv_transpose2d", loc,
             "expected a weight [", x.size(1), ", O / groups, kH, kW], got ", detail::describe(weight));
  const Pair s = o.stride(), p = o.padding(), op = o.output_padding(), d = o.dilation();
  LOOM_CHECK(s.h > 0 && s.w > 0 && d.h > 0 && d.w > 0 && p.h >= 0 && p.w >= 0, "conv_transpose2d", loc,
             "stride and dilation must be positive and padding non-negative");
  LOOM_CHECK(op.h >= 0 && op.w >= 0 && (op.h < s.h || op.h < d.h) && (op.w < s.w || op.w < d.w), "conv_transpose2d", loc,
             "output padding must be smaller than either stride or dilation, got [", op.h, ", ", op.w, "]");
  const int64_t kh = weight.size(2), kw = weight.size(3);
  Tensor z = spread(spread(x, 2, s.h, loc), 3, s.w, loc);
  const int64_t ph = d.h * (kh - 1) - p.h, pw = d.w * (kw - 1) - p.w;
  z = pad(z, PadFuncOptions({pw, pw + op.w, ph, ph + op.h}), loc);
  // The equivalent convolution's weight [O, C / groups, kH, kW]: each
  // group's [C / G, O / G] block transposed, the kernel flipped.
  const int64_t c = weight.size(0), og = weight.size(1);
  const Tensor w = weight.flip({2, 3}, loc)
                       .reshape({groups, c / groups, og, kh, kw}, loc)
                       .transpose(1, 2, loc)
                       .reshape({groups * og, c / groups, kh, kw}, loc);
  Tensor y = conv2d(z, w, Conv2dFuncOptions().bias(o.bias()).dilation(d).groups(groups), loc);
  return input.dim() == 3 ? y.squeeze(0, loc) : y;
}

}  // namespace functional

ConvTranspose2dImpl::ConvTranspose2dImpl(const ConvTranspose2dOptions& o) : options(o) {
  LOOM_CHECK(o.groups() > 0 && o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0,
             "ConvTranspose2d", SourceLoc::current(), "in_channels (", o.in_channels(), ") and out_channels (",
             o.out_channels(), ") must be divisible by groups (", o.groups(), ")");
  weight = register_parameter(
      "weight", loom::empty({o.in_channels(), o.out_channels() / o.groups(), o.kernel_size().h, o.kernel_size().w}));
  if (o.bias()) bias = register_parameter("bias", loom::empty({o.out_channels()}));
  reset_parameters();
}

void ConvTranspose2dImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double fan_in = static_cast<double>(options.out_channels() / options.groups() * options.kernel_size().h *
                                              options.kernel_size().w);
    const double bound = fan_in > 0 ? 1 / std::sqrt(fan_in) : 0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor ConvTranspose2dImpl::forward(const Tensor& input, SourceLoc loc) {
  return functional::conv_transpose2d(input, weight,
                                      functional::ConvTranspose2dFuncOptions()
                                          .bias(bias)
                                          .stride(options.stride())
                                          .padding(options.padding())
                                          .output_padding(options.output_padding())
                                          .dilation(options.dilation())
                                          .groups(options.groups()),
                                      loc);
}

void ConvTranspose2dImpl::pretty_print(std::ostream& os) const {
  os << "ConvTranspose2d(" << options.in_channels() << ", " << options.out_channels() << ")";
}

Conv1dImpl::Conv1dImpl(const Conv1dOptions& o) : options(o) {
  LOOM_CHECK(o.groups() > 0 && o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0, "Conv1d",
             SourceLoc::current(), "in_channels (", o.in_channels(), ") and out_channels (", o.out_channels(),
             ") must be divisible by groups (", o.groups(), ")");
  weight = register_parameter("weight", loom::empty({o.out_channels(), o.in_channels() / o.groups(), o.kernel_size()}));
  if (o.bias()) bias = register_parameter("bias", loom::empty({o.out_channels()}));
  reset_parameters();
}

void Conv1dImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double fan_in = static_cast<double>(options.in_channels() / options.groups() * options.kernel_size());
    const double bound = fan_in > 0 ? 1 / std::sqrt(fan_in) : 0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv1dImpl::forward(const Tensor& input, SourceLoc loc) {
  return functional::conv1d(input, weight,
                            functional::Conv1dFuncOptions()
                                .bias(bias)
                                .stride(options.stride())
                                .padding(options.padding())
                                .dilation(options.dilation())
                                .groups(options.groups()),
                            loc);
}

void Conv1dImpl::pretty_print(std::ostream& os) const {
  os << "Conv1d(" << options.in_channels() << ", " << options.out_channels() << ", kernel_size=" << options.kernel_size()
     << ", stride=" << options.stride() << ")";
}

}  // namespace loom::nn
