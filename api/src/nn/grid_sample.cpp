// loom/nn/grid_sample.h, written with loom's ops as PyTorch's
// GridSampler.h defines the sampling: each point's pixel coordinates
// (unnormalized, then clipped or reflected by the padding mode), the
// neighbouring pixels it reads (1 for nearest, 2 x 2 for bilinear, 4 x 4 for
// bicubic) as gathers from the flattened image, and their weights. A
// neighbour outside the image weighs 0 (its index is clamped so the gather
// stays in bounds). The gradient is that of the gathers (a scatter-add into
// the image) and of the weights (into the grid); floor's is zero, as in
// PyTorch's kernels.
#include <loom/functions.h>
#include <loom/nn/grid_sample.h>

#include "api/src/record.h"

namespace loom::nn::functional {
namespace {

// PyTorch's reflect_coordinates: x reflected into [low, high] given as twice
// their values.
Tensor reflect(const Tensor& x, double twice_low, double twice_high, const SourceLoc& loc) {
  if (twice_low == twice_high) return zeros_like(x, {}, loc);
  const double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  Tensor in = x.sub(lo, 1, loc).abs(loc);
  Tensor extra = in.fmod(span, loc);
  Tensor odd = in.div(span, loc).floor(loc).remainder(2, loc).ne(0, loc);
  return where(odd, extra.neg(loc).add(span + lo, 1, loc), extra.add(lo, 1, loc), loc);
}

// A coordinate after the padding mode (PyTorch's compute_coordinates).
Tensor pad_coordinate(const Tensor& c, int64_t size, GridSamplePadding padding, bool align, const SourceLoc& loc) {
  auto clip = [&](const Tensor& v) { return v.clamp(0.0, static_cast<double>(size - 1), loc); };
  switch (padding) {
    case GridSamplePadding::Zeros: return c;
    case GridSamplePadding::Border: return clip(c);
    case GridSamplePadding::Reflection:
      return clip(align ? reflect(c, 0, 2.0 * (size - 1), loc) : reflect(c, -1, 2.0 * size - 1, loc));
  }
  throw Error("grid_sample: unknown padding mode");
}

struct Image {
  Tensor flat;  // [N, C, H * W]
  int64_t n, c, h, w;
};

// The values at integer pixel coordinates (ix, iy) [N, Ho, Wo] (floating,
// whole numbers), 0 where outside: [N, C, Ho, Wo].
Tensor read(const Image& im, const Tensor& ix, const Tensor& iy, const SourceLoc& loc) {
  Tensor inside = ix.ge(0, loc)
                      .logical_and(ix.le(static_cast<double>(im.w - 1), loc), loc)
                      .logical_and(iy.ge(0, loc), loc)
                      .logical_and(iy.le(static_cast<double>(im.h - 1), loc), loc);
  Tensor xi = ix.clamp(0.0, static_cast<double>(im.w - 1), loc).to(kLong, loc);
  Tensor yi = iy.clamp(0.0, static_cast<double>(im.h - 1), loc).to(kLong, loc);
  const int64_t ho = ix.size(1), wo = ix.size(2);
  Tensor lin = yi.mul(im.w, loc).add(xi, 1, loc).reshape({im.n, 1, ho * wo}, loc).expand({im.n, im.c, ho * wo}, loc);
  Tensor v = im.flat.gather(2, lin, loc).reshape({im.n, im.c, ho, wo}, loc);
  return v.mul(inside.unsqueeze(1, loc).to(v.dtype(), loc), loc);
}

}  // namespace

Tensor grid_sample(const Tensor& input, const Tensor& grid, const GridSampleFuncOptions& o, SourceLoc loc) {
  detail::impl_of(input, "grid_sample", loc);
  detail::impl_of(grid, "grid_sample", loc);
  LOOM_CHECK(input.dim() == 4, "grid_sample", loc, "expected a 4-D input [N, C, H, W], got ", detail::describe(input),
             " (5-D volumetric sampling is not supported)");
  LOOM_CHECK(grid.dim() == 4 && grid.size(3) == 2 && grid.size(0) == input.size(0), "grid_sample", loc,
             "expected a grid [N, H_out, W_out, 2] with the input's N, got ", detail::describe(grid), " for ",
             detail::describe(input));
  LOOM_CHECK(is_floating_point(input.dtype()) && input.dtype() == grid.dtype(), "grid_sample", loc,
             "expected input and grid of one floating dtype, got ", detail::describe(input), " and ",
             detail::describe(grid));
  LOOM_CHECK(input.device() == grid.device(), "grid_sample", loc, "expected input and grid on one device, got ",
             detail::describe(input), " and ", detail::describe(grid));
  const InterpolateMode::Kind mode = o.mode().kind;
  LOOM_CHECK(mode == InterpolateMode::Bilinear || mode == InterpolateMode::Nearest || mode == InterpolateMode::Bicubic,
             "grid_sample", loc, "mode must be kBilinear, kNearest or kBicubic");
  const bool align = o.align_corners().value_or(false);
  const Image im{input.reshape({input.size(0), input.size(1), input.size(2) * input.size(3)}, loc), input.size(0),
                 input.size(1), input.size(2), input.size(3)};
  // Pixel coordinates of each point, [N, Ho, Wo].
  auto unnormalize = [&](const Tensor& g, int64_t size) {
    return align ? g.add(1, 1, loc).mul((size - 1) / 2.0, loc) : g.add(1, 1, loc).mul(size / 2.0, loc).sub(0.5, 1, loc);
  };
  Tensor x = unnormalize(grid.select(3, 0, loc), im.w), y = unnormalize(grid.select(3, 1, loc), im.h);
  if (mode == InterpolateMode::Bicubic) {
    // The coordinate itself is not padded; each of the 16 taps is.
    Tensor x0 = x.floor(loc), y0 = y.floor(loc);
    Tensor tx = x.sub(x0, 1, loc), ty = y.sub(y0, 1, loc);
    constexpr double A = -0.75;
    auto coefficients = [&](const Tensor& t) {
      auto near = [&](const Tensor& v) { return v.mul(A + 2, loc).sub(A + 3, 1, loc).mul(v, loc).mul(v, loc).add(1, 1, loc); };
      auto far = [&](const Tensor& v) {
        return v.mul(A, loc).sub(5 * A, 1, loc).mul(v, loc).add(8 * A, 1, loc).mul(v, loc).sub(4 * A, 1, loc);
      };
      Tensor one_minus = t.neg(loc).add(1, 1, loc);
      return std::vector<Tensor>{far(t.add(1, 1, loc)), near(t), near(one_minus), far(one_minus.add(1, 1, loc))};
    };
    const std::vector<Tensor> wx = coefficients(tx), wy = coefficients(ty);
    Tensor out;
    for (int i = 0; i < 4; ++i) {
      Tensor yi = pad_coordinate(y0.add(i - 1, 1, loc), im.h, o.padding_mode(), align, loc);
      Tensor row;
      for (int j = 0; j < 4; ++j) {
        Tensor xj = pad_coordinate(x0.add(j - 1, 1, loc), im.w, o.padding_mode(), align, loc);
        // Reflected taps are whole numbers again only after rounding toward
        // zero, as PyTorch's cast to an integer index.
        Tensor v = read(im, xj.trunc(loc), yi.trunc(loc), loc).mul(wx[j].unsqueeze(1, loc), loc);
        row = j == 0 ? v : row.add(v, 1, loc);
      }
      Tensor term = row.mul(wy[i].unsqueeze(1, loc), loc);
      out = i == 0 ? term : out.add(term, 1, loc);
    }
    return out;
  }
  x = pad_coordinate(x, im.w, o.padding_mode(), align, loc);
  y = pad_coordinate(y, im.h, o.padding_mode(), align, loc);
  if (mode == InterpolateMode::Nearest) return read(im, x.round(loc), y.round(loc), loc);  // half to even
  Tensor x0 = x.floor(loc), y0 = y.floor(loc);
  Tensor x1 = x0.add(1, 1, loc), y1 = y0.add(1, 1, loc);
  auto w = [&](const Tensor& t) { return t.unsqueeze(1, loc); };
  Tensor fx1 = x1.sub(x, 1, loc), fx0 = x.sub(x0, 1, loc), fy1 = y1.sub(y, 1, loc), fy0 = y.sub(y0, 1, loc);
  return read(im, x0, y0, loc).mul(w(fx1.mul(fy1, loc)), loc)
      .add(read(im, x1, y0, loc).mul(w(fx0.mul(fy1, loc)), loc), 1, loc)
      .add(read(im, x0, y1, loc).mul(w(fx1.mul(fy0, loc)), loc), 1, loc)
      .add(read(im, x1, y1, loc).mul(w(fx0.mul(fy0, loc)), loc), 1, loc);
}

Tensor affine_grid(const Tensor& theta, const std::vector<int64_t>& size, bool align_corners, SourceLoc loc) {
  detail::impl_of(theta, "affine_grid", loc);
  LOOM_CHECK(size.size() == 4, "affine_grid", loc, "expected a size [N, C, H, W] (5-D sizes are not supported), got ",
             size.size(), " elements");
  LOOM_CHECK(theta.dim() == 3 && theta.size(0) == size[0] && theta.size(1) == 2 && theta.size(2) == 3, "affine_grid",
             loc, "expected theta [N, 2, 3] for size N = ", size[0], ", got ", detail::describe(theta));
  LOOM_CHECK(is_floating_point(theta.dtype()), "affine_grid", loc, "expected a floating theta, got ",
             detail::describe(theta));
  const int64_t h = size[2], w = size[3];
  const TensorOptions opts = TensorOptions(theta.dtype()).device(theta.device());
  // PyTorch's linspace_from_neg_one: corners at +-1, or pixel centres inside them.
  auto base = [&](int64_t n) {
    if (n <= 1) return zeros({n}, opts, loc);
    Tensor r = linspace(-1, 1, n, opts, loc);
    return align_corners ? r : r.mul(static_cast<double>(n - 1) / static_cast<double>(n), loc);
  };
  Tensor xs = base(w).reshape({1, w, 1}, loc).expand({h, w, 1}, loc);
  Tensor ys = base(h).reshape({h, 1, 1}, loc).expand({h, w, 1}, loc);
  Tensor points = cat({xs, ys, ones({h, w, 1}, opts, loc)}, 2, loc).reshape({1, h * w, 3}, loc);  // (x, y, 1)
  return points.expand({size[0], h * w, 3}, loc).bmm(theta.transpose(1, 2, loc), loc).reshape({size[0], h, w, 2}, loc);
}

}  // namespace loom::nn::functional
