// Sampling an image at given points, as torch::nn::functional::grid_sample
// (and affine_grid, which makes the points of an affine transform).
#pragma once
#include <optional>
#include <vector>

#include <loom/arg.h>
#include <loom/nn/upsample.h>
#include <loom/tensor.h>

#pragma GCC visibility push(default)
namespace loom {

// What a point outside the image reads: zeros, the nearest border value, or
// the image reflected at its border.
enum class GridSamplePadding { Zeros, Border, Reflection };
inline constexpr GridSamplePadding kZeros = GridSamplePadding::Zeros;
inline constexpr GridSamplePadding kBorder = GridSamplePadding::Border;
inline constexpr GridSamplePadding kReflection = GridSamplePadding::Reflection;

namespace nn::functional {

struct GridSampleFuncOptions {
  LOOM_ARG(GridSampleFuncOptions, InterpolateMode, mode, kBilinear)  // kBilinear, kNearest or kBicubic
  LOOM_ARG(GridSampleFuncOptions, GridSamplePadding, padding_mode, kZeros)
  LOOM_ARG(GridSampleFuncOptions, std::optional<bool>, align_corners, std::nullopt)  // false when unset
};

// input [N, C, H, W], grid [N, Ho, Wo, 2] of (x, y) in [-1, 1] (-1 the left /
// top edge: of the first pixel's centre with align_corners, of the image
// without) -> [N, C, Ho, Wo]. Differentiable in both input and grid.
Tensor grid_sample(const Tensor& input, const Tensor& grid, const GridSampleFuncOptions& options = {}, LOOM_LOC);

// theta [N, 2, 3] -> the grid [N, H, W, 2] of theta applied to the
// normalized coordinates of an output of `size` [N, C, H, W].
Tensor affine_grid(const Tensor& theta, const std::vector<int64_t>& size, bool align_corners = false, LOOM_LOC);

}  // namespace nn::functional
}  // namespace loom
#pragma GCC visibility pop
