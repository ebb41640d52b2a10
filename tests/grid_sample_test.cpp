// grid_sample, affine_grid and interpolate's bicubic and trilinear modes,
// against PyTorch's formulas (GridSampler.h, UpSample.h) written out here
// with scalars, in float64, with gradient checks.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "gradcheck.h"
#include "test_util.h"

namespace {

namespace F = loom::nn::functional;
using loom::Tensor;
using loom_test::all_close;
using loom_test::gradcheck;
using loom_test::input;
using T = std::vector<Tensor>;
using V = std::vector<double>;

class GridSampleTest : public loom_test::BackendTest {};

double reflect(double x, double twice_low, double twice_high) {
  if (twice_low == twice_high) return 0;
  const double mn = twice_low / 2, span = (twice_high - twice_low) / 2;
  x = std::fabs(x - mn);
  const double extra = std::fmod(x, span);
  const int flips = static_cast<int>(std::floor(x / span));
  return flips % 2 == 0 ? extra + mn : span - extra + mn;
}
double pad(double x, int64_t n, loom::GridSamplePadding p, bool align) {
  auto clip = [&](double v) { return std::min(static_cast<double>(n - 1), std::max(v, 0.0)); };
  if (p == loom::kBorder) return clip(x);
  if (p == loom::kReflection) return clip(align ? reflect(x, 0, 2.0 * (n - 1)) : reflect(x, -1, 2.0 * n - 1));
  return x;
}
double cubic1(double x) { const double A = -0.75; return ((A + 2) * x - (A + 3)) * x * x + 1; }
double cubic2(double x) { const double A = -0.75; return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

// PyTorch's grid_sampler_2d_cpu for one output element.
V reference(const V& in, int64_t N, int64_t C, int64_t H, int64_t W, const V& grid, int64_t Ho, int64_t Wo,
            loom::InterpolateMode::Kind mode, loom::GridSamplePadding padding, bool align) {
  V out;
  auto at = [&](int64_t n, int64_t c, int64_t y, int64_t x) {
    return (y >= 0 && y < H && x >= 0 && x < W) ? in[((n * C + c) * H + y) * W + x] : 0.0;
  };
  auto unnorm = [&](double g, int64_t size) { return align ? (g + 1) / 2 * (size - 1) : ((g + 1) * size - 1) / 2; };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          const double gx = grid[((n * Ho + i) * Wo + j) * 2], gy = grid[((n * Ho + i) * Wo + j) * 2 + 1];
          double x = unnorm(gx, W), y = unnorm(gy, H);
          if (mode == loom::InterpolateMode::Bicubic) {
            const double x0 = std::floor(x), y0 = std::floor(y), tx = x - x0, ty = y - y0;
            const double wx[4] = {cubic2(tx + 1), cubic1(tx), cubic1(1 - tx), cubic2(2 - tx)};
            const double wy[4] = {cubic2(ty + 1), cubic1(ty), cubic1(1 - ty), cubic2(2 - ty)};
            double s = 0;
            for (int a = 0; a < 4; ++a)
              for (int b = 0; b < 4; ++b) {
                const auto yy = static_cast<int64_t>(pad(y0 - 1 + a, H, padding, align));
                const auto xx = static_cast<int64_t>(pad(x0 - 1 + b, W, padding, align));
                s += at(n, c, yy, xx) * wx[b] * wy[a];
              }
            out.push_back(s);
            continue;
          }
          x = pad(x, W, padding, align), y = pad(y, H, padding, align);
          if (mode == loom::InterpolateMode::Nearest) {
            out.push_back(at(n, c, static_cast<int64_t>(std::nearbyint(y)), static_cast<int64_t>(std::nearbyint(x))));
            continue;
          }
          const auto x0 = static_cast<int64_t>(std::floor(x)), y0 = static_cast<int64_t>(std::floor(y));
          const double fx = x - x0, fy = y - y0;
          out.push_back(at(n, c, y0, x0) * (1 - fx) * (1 - fy) + at(n, c, y0, x0 + 1) * fx * (1 - fy) +
                        at(n, c, y0 + 1, x0) * (1 - fx) * fy + at(n, c, y0 + 1, x0 + 1) * fx * fy);
        }
  return out;
}

TEST_P(GridSampleTest, EveryModePaddingAndAlignmentMatchesPyTorchsFormula) {
  const int64_t N = 2, C = 3, H = 4, W = 5, Ho = 3, Wo = 6;
  Tensor x = input({N, C, H, W}, 1);
  Tensor grid = input({N, Ho, Wo, 2}, 2, -1.4, 1.4);  // some points outside the image
  for (auto mode : {loom::InterpolateMode::Bilinear, loom::InterpolateMode::Nearest, loom::InterpolateMode::Bicubic})
    for (auto padding : {loom::kZeros, loom::kBorder, loom::kReflection})
      for (bool align : {false, true}) {
        SCOPED_TRACE(std::to_string(mode) + " " + std::to_string(static_cast<int>(padding)) + " " + std::to_string(align));
        Tensor got = F::grid_sample(x, grid, F::GridSampleFuncOptions().mode(mode).padding_mode(padding).align_corners(align));
        EXPECT_EQ(got.sizes(), (std::vector<int64_t>{N, C, Ho, Wo}));
        EXPECT_TRUE(all_close(got, reference(x.to_vector<double>(), N, C, H, W, grid.to_vector<double>(), Ho, Wo, mode,
                                             padding, align),
                              1e-12, 1e-12));
      }
}

TEST_P(GridSampleTest, IdentityAffineGridReproducesTheImage) {
  Tensor x = input({2, 3, 4, 5}, 3);
  Tensor theta = loom::tensor({1.0, 0.0, 0.0, 0.0, 1.0, 0.0}, loom::kDouble).view({1, 2, 3}).expand({2, 2, 3});
  for (bool align : {false, true}) {
    Tensor grid = F::affine_grid(theta, {2, 3, 4, 5}, align);
    EXPECT_EQ(grid.sizes(), (std::vector<int64_t>{2, 4, 5, 2}));
    Tensor y = F::grid_sample(x, grid, F::GridSampleFuncOptions().align_corners(align));
    EXPECT_TRUE(all_close(y, x.to_vector<double>(), 1e-12, 1e-12)) << align;
  }
  // A half-pixel shift to the right with align_corners: each output is the mean of two neighbours.
  Tensor shift = loom::tensor({1.0, 0.0, 0.5, 0.0, 1.0, 0.0}, loom::kDouble).view({1, 2, 3});
  Tensor row = loom::tensor({0.0, 2.0, 4.0}, loom::kDouble).view({1, 1, 1, 3});
  Tensor g = F::affine_grid(shift, {1, 1, 1, 3}, true);
  EXPECT_TRUE(all_close(F::grid_sample(row, g, F::GridSampleFuncOptions().align_corners(true)), {1.0, 3.0, 2.0}));
  EXPECT_LOOM_ERROR(F::grid_sample(x, input({2, 4, 5, 3}, 4)), "grid_sample", "grid [N, H_out, W_out, 2]");
}

TEST_P(GridSampleTest, GradientsFlowToTheImageAndTheGrid) {
  for (auto mode : {loom::InterpolateMode::Bilinear, loom::InterpolateMode::Bicubic})
    for (auto padding : {loom::kZeros, loom::kBorder, loom::kReflection}) {
      SCOPED_TRACE(std::to_string(mode) + " " + std::to_string(static_cast<int>(padding)));
      EXPECT_TRUE(gradcheck(
          [&](const T& v) {
            return F::grid_sample(v[0], v[1], F::GridSampleFuncOptions().mode(mode).padding_mode(padding));
          },
          {input({1, 2, 3, 4}, 5), input({1, 2, 3, 2}, 6, -0.9, 0.9)}));
    }
  EXPECT_TRUE(gradcheck([](const T& v) { return F::affine_grid(v[0], {2, 1, 3, 4}); }, {input({2, 2, 3}, 7)}));
}

// interpolate's bicubic (separable cubic convolution, taps clamped into
// the image) and trilinear modes.
TEST_P(GridSampleTest, InterpolateBicubicAndTrilinear) {
  Tensor x = input({1, 2, 4, 5}, 8);
  const V xv = x.to_vector<double>();
  for (bool align : {false, true}) {
    Tensor up = F::interpolate(x, F::InterpolateFuncOptions()
                                      .size(std::vector<int64_t>{7, 3})
                                      .mode(loom::kBicubic)
                                      .align_corners(align));
    auto src = [&](int64_t i, int64_t in, int64_t out) {
      return align ? (out > 1 ? static_cast<double>(i) * (in - 1) / (out - 1) : 0.0)
                   : (i + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
    };
    V want;
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < 7; ++i)
        for (int j = 0; j < 3; ++j) {
          const double sy = src(i, 4, 7), sx = src(j, 5, 3);
          const double y0 = std::floor(sy), x0 = std::floor(sx), ty = sy - y0, tx = sx - x0;
          const double wy[4] = {cubic2(ty + 1), cubic1(ty), cubic1(1 - ty), cubic2(2 - ty)};
          const double wx[4] = {cubic2(tx + 1), cubic1(tx), cubic1(1 - tx), cubic2(2 - tx)};
          double s = 0;
          for (int a = 0; a < 4; ++a)
            for (int b = 0; b < 4; ++b) {
              const int64_t yy = std::clamp<int64_t>(static_cast<int64_t>(y0) - 1 + a, 0, 3);
              const int64_t xx = std::clamp<int64_t>(static_cast<int64_t>(x0) - 1 + b, 0, 4);
              s += xv[(c * 4 + yy) * 5 + xx] * wy[a] * wx[b];
            }
          want.push_back(s);
        }
    EXPECT_TRUE(all_close(up, want, 1e-12, 1e-12)) << align;
  }
  // Trilinear x2 without align_corners: the linear rule along each of the three dims.
  Tensor v = input({1, 1, 2, 3, 2}, 9);
  const V vv = v.to_vector<double>();
  Tensor t = F::interpolate(v, F::InterpolateFuncOptions().scale_factor(std::vector<double>{2.0}).mode(loom::kTrilinear));
  ASSERT_EQ(t.sizes(), (std::vector<int64_t>{1, 1, 4, 6, 4}));
  auto lin = [](int64_t i, int64_t in) {
    const double s = std::max((i + 0.5) / 2.0 - 0.5, 0.0);
    const int64_t i0 = std::min(static_cast<int64_t>(s), in - 1);
    return std::tuple{i0, std::min(i0 + 1, in - 1), s - static_cast<double>(i0)};
  };
  V want;
  for (int64_t d = 0; d < 4; ++d)
    for (int64_t h = 0; h < 6; ++h)
      for (int64_t w = 0; w < 4; ++w) {
        auto [d0, d1, fd] = lin(d, 2);
        auto [h0, h1, fh] = lin(h, 3);
        auto [w0, w1, fw] = lin(w, 2);
        auto at = [&](int64_t a, int64_t b, int64_t c) { return vv[(a * 3 + b) * 2 + c]; };
        double s = 0;
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b)
            for (int c = 0; c < 2; ++c)
              s += at(a ? d1 : d0, b ? h1 : h0, c ? w1 : w0) * (a ? fd : 1 - fd) * (b ? fh : 1 - fh) * (c ? fw : 1 - fw);
        want.push_back(s);
      }
  EXPECT_TRUE(all_close(t, want, 1e-12, 1e-12));
  EXPECT_TRUE(gradcheck(
      [](const T& a) {
        return F::interpolate(a[0], F::InterpolateFuncOptions().size(std::vector<int64_t>{5, 3}).mode(loom::kBicubic));
      },
      {input({1, 1, 3, 4}, 10)}));
  EXPECT_LOOM_ERROR(F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{3, 3, 3}).mode(loom::kTrilinear)),
                    "interpolate", "trilinear a 5-D");
}

LOOM_INSTANTIATE_BACKENDS(GridSampleTest);

}  // namespace
