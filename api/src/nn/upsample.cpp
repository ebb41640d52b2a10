// loom/nn/upsample.h: each resized dim is an index_select of the source
// positions PyTorch's rules pick (two of them, weighed, for the linear
// modes; four for bicubic), so the gradient is index_select's. Bicubic is
// separable, so resizing one dim after the other is PyTorch's 4 x 4 sum.
#include <loom/functions.h>
#include <loom/nn/functional.h>
#include <loom/nn/upsample.h>

#include <algorithm>
#include <cmath>

#include "api/src/record.h"

namespace loom {

InterpolateMode::InterpolateMode(Nonlinearity n) : kind(Linear) {
  if (n != kLinear) throw Error("interpolate: a Nonlinearity is not a mode (only kLinear is)");
}

namespace nn::functional {

namespace {

// Resizes dim d of x from n to `out`; `scale` is PyTorch's source step
// (1 / scale_factor when one is given, else n / out).
Tensor resize_dim(const Tensor& x, int64_t d, int64_t out, double scale, InterpolateMode::Kind mode,
                  bool align_corners, const SourceLoc& loc) {
  const int64_t n = x.size(d);
  const TensorOptions longs = TensorOptions(kLong).device(x.device());
  if (mode == InterpolateMode::Nearest) {
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < out; ++i)
      idx.push_back(std::min(static_cast<int64_t>(std::floor(static_cast<double>(i) * scale)), n - 1));
    return x.index_select(d, tensor(idx, longs, loc), loc);
  }
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[static_cast<size_t>(d)] = out;
  if (mode == InterpolateMode::Bicubic) {
    // Taps at floor(src) - 1 .. + 2, clamped into [0, n - 1]; the source
    // index is not clamped at 0 (PyTorch's `cubic` source index).
    std::vector<std::vector<int64_t>> taps(4);
    std::vector<std::vector<double>> weights(4);
    for (int64_t i = 0; i < out; ++i) {
      const double src = align_corners ? (out > 1 ? static_cast<double>(i) * (n - 1) / (out - 1) : 0.0)
                                       : (static_cast<double>(i) + 0.5) * scale - 0.5;
      const double f = std::floor(src), t = src - f;
      constexpr double A = -0.75;
      auto near = [](double v) { return ((A + 2) * v - (A + 3)) * v * v + 1; };          // |v| <= 1
      auto far = [](double v) { return ((A * v - 5 * A) * v + 8 * A) * v - 4 * A; };     // 1 < |v| < 2
      const double w[4] = {far(t + 1), near(t), near(1 - t), far(2 - t)};
      for (int k = 0; k < 4; ++k) {
        taps[k].push_back(std::clamp(static_cast<int64_t>(f) - 1 + k, int64_t{0}, n - 1));
        weights[k].push_back(w[k]);
      }
    }
    Tensor sum;
    for (int k = 0; k < 4; ++k) {
      const Tensor w = tensor(weights[k], TensorOptions(x.dtype()).device(x.device()), loc).reshape(shape, loc);
      Tensor term = x.index_select(d, tensor(taps[k], longs, loc), loc).mul(w, loc);
      sum = k == 0 ? term : sum.add(term, 1, loc);
    }
    return sum;
  }
  std::vector<int64_t> lo, hi;
  std::vector<double> w_hi;
  for (int64_t i = 0; i < out; ++i) {
    double src = align_corners ? (out > 1 ? static_cast<double>(i) * (n - 1) / (out - 1) : 0.0)
                               : std::max((static_cast<double>(i) + 0.5) * scale - 0.5, 0.0);
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), n - 1);
    lo.push_back(i0);
    hi.push_back(std::min(i0 + 1, n - 1));
    w_hi.push_back(src - static_cast<double>(i0));
  }
  const Tensor w = tensor(w_hi, TensorOptions(x.dtype()).device(x.device()), loc).reshape(shape, loc);
  const Tensor a = x.index_select(d, tensor(lo, longs, loc), loc), b = x.index_select(d, tensor(hi, longs, loc), loc);
  return a.add(b.sub(a, 1, loc).mul(w, loc), 1, loc);
}

}  // namespace

Tensor interpolate(const Tensor& input, const InterpolateFuncOptions& o, SourceLoc loc) {
  detail::impl_of(input, "interpolate", loc);
  const InterpolateMode::Kind mode = o.mode().kind;
  const int64_t spatial = input.dim() - 2;
  LOOM_CHECK(spatial >= 1 && spatial <= 3, "interpolate", loc, "expected a 3-D, 4-D or 5-D input, got ",
             detail::describe(input));
  LOOM_CHECK(mode == InterpolateMode::Nearest || (mode == InterpolateMode::Area && spatial <= 2) ||
                 (mode == InterpolateMode::Linear && spatial == 1) ||
                 ((mode == InterpolateMode::Bilinear || mode == InterpolateMode::Bicubic) && spatial == 2) ||
                 (mode == InterpolateMode::Trilinear && spatial == 3),
             "interpolate", loc, "linear needs a 3-D input, bilinear and bicubic a 4-D one, trilinear a 5-D one, and "
             "area a 3-D or 4-D one; got ", detail::describe(input));
  LOOM_CHECK(o.size().has_value() != o.scale_factor().has_value(), "interpolate", loc,
             "exactly one of size and scale_factor must be given");
  LOOM_CHECK(!((mode == InterpolateMode::Nearest || mode == InterpolateMode::Area) && o.align_corners().value_or(false)),
             "interpolate", loc, "align_corners only has an effect in the linear modes");
  Tensor x = input;
  std::vector<int64_t> sizes;
  for (int64_t k = 0; k < spatial; ++k) {
    const int64_t d = 2 + k, n = input.size(d);
    int64_t out;
    double scale;
    if (o.size()) {
      const std::vector<int64_t>& s = *o.size();
      LOOM_CHECK(s.size() == 1 || static_cast<int64_t>(s.size()) == spatial, "interpolate", loc, "size must have 1 or ",
                 spatial, " elements, got ", s.size());
      out = s[s.size() == 1 ? 0 : static_cast<size_t>(k)];
      scale = static_cast<double>(n) / static_cast<double>(out);
    } else {
      const std::vector<double>& f = *o.scale_factor();
      LOOM_CHECK(f.size() == 1 || static_cast<int64_t>(f.size()) == spatial, "interpolate", loc,
                 "scale_factor must have 1 or ", spatial, " elements, got ", f.size());
      const double factor = f[f.size() == 1 ? 0 : static_cast<size_t>(k)];
      LOOM_CHECK(factor > 0, "interpolate", loc, "scale_factor must be positive, got ", factor);
      out = static_cast<int64_t>(std::floor(static_cast<double>(n) * factor));
      scale = 1.0 / factor;
    }
    LOOM_CHECK(out > 0, "interpolate", loc, "the output size must be positive, got ", out);
    sizes.push_back(out);
    if (mode != InterpolateMode::Area) x = resize_dim(x, d, out, scale, mode, o.align_corners().value_or(false), loc);
  }
  if (mode == InterpolateMode::Area) {  // PyTorch's area mode is adaptive average pooling
    if (spatial == 2) return adaptive_avg_pool2d(input, AdaptiveAvgPool2dFuncOptions({sizes[0], sizes[1]}), loc);
    return adaptive_avg_pool2d(input.unsqueeze(2, loc), AdaptiveAvgPool2dFuncOptions({1, sizes[0]}), loc).squeeze(2, loc);
  }
  return x;
}

}  // namespace nn::functional
}  // namespace loom
