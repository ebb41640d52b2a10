// Resizing, as torch::nn's: F::interpolate and Upsample with the nearest,
// linear (3-D input), bilinear and bicubic (4-D input), trilinear (5-D input)
// and area (3-D and 4-D input) modes, align_corners, and a size or a scale
// factor; PyTorch's source-index rules.
#pragma once
#include <optional>
#include <vector>

#include <loom/arg.h>
#include <loom/nn/init.h>
#include <loom/nn/module.h>

#pragma GCC visibility push(default)
namespace loom {

// How interpolate picks and weighs its source elements. kLinear is shared
// with the init gains' Nonlinearity, as libtorch's kLinear is one name for
// both.
class InterpolateMode {
 public:
  enum Kind { Nearest, Linear, Bilinear, Area, Bicubic, Trilinear };
  constexpr InterpolateMode(Kind k) : kind(k) {}  // NOLINT
  InterpolateMode(Nonlinearity n);                // NOLINT: kLinear only
  Kind kind;
};
inline constexpr InterpolateMode::Kind kNearest = InterpolateMode::Nearest;
inline constexpr InterpolateMode::Kind kBilinear = InterpolateMode::Bilinear;
// Keys' cubic convolution (a = -0.75) over 4 x 4 sources, as PyTorch's.
inline constexpr InterpolateMode::Kind kBicubic = InterpolateMode::Bicubic;
inline constexpr InterpolateMode::Kind kTrilinear = InterpolateMode::Trilinear;
// The mean of each output cell's source window (adaptive average pooling).
inline constexpr InterpolateMode::Kind kArea = InterpolateMode::Area;

namespace nn {

struct UpsampleOptions {
  LOOM_ARG(UpsampleOptions, std::optional<std::vector<int64_t>>, size, std::nullopt)
  LOOM_ARG(UpsampleOptions, std::optional<std::vector<double>>, scale_factor, std::nullopt)
  LOOM_ARG(UpsampleOptions, InterpolateMode, mode, kNearest)
  LOOM_ARG(UpsampleOptions, std::optional<bool>, align_corners, std::nullopt)
};

namespace functional {
using InterpolateFuncOptions = UpsampleOptions;
// input [N, C, L] (nearest, linear, area), [N, C, H, W] (nearest, bilinear, bicubic, area) or
// [N, C, D, H, W] (nearest, trilinear).
Tensor interpolate(const Tensor& input, const InterpolateFuncOptions& options, LOOM_LOC);
}  // namespace functional

class UpsampleImpl : public Module {
 public:
  explicit UpsampleImpl(const UpsampleOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input, LOOM_LOC) { return functional::interpolate(input, options, loc); }
  void pretty_print(std::ostream& os) const override { os << "Upsample"; }
  UpsampleOptions options;
};
LOOM_MODULE(Upsample);

}  // namespace nn
}  // namespace loom
#pragma GCC visibility pop
