// Conv1d, ConvTranspose2d and padding, as torch::nn's: Conv1d (a Conv2d
// over a height of one), ConvTranspose2d (a Conv2d over the input with
// stride - 1 zeros between its elements, padded, with the kernel flipped),
// F::pad with constant, reflect, replicate and circular modes.
#pragma once
#include <vector>

#include <loom/arg.h>
#include <loom/nn/module.h>
#include <loom/nn/options.h>

#pragma GCC visibility push(default)
namespace loom {

enum class PadMode { Constant, Reflect, Replicate, Circular };
inline constexpr PadMode kConstant = PadMode::Constant;
inline constexpr PadMode kReflect = PadMode::Reflect;
inline constexpr PadMode kReplicate = PadMode::Replicate;
inline constexpr PadMode kCircular = PadMode::Circular;

namespace nn {

struct Conv1dOptions {
  Conv1dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  LOOM_ARG(Conv1dOptions, int64_t, in_channels, 0)
  LOOM_ARG(Conv1dOptions, int64_t, out_channels, 0)
  LOOM_ARG(Conv1dOptions, int64_t, kernel_size, 1)
  LOOM_ARG(Conv1dOptions, int64_t, stride, 1)
  LOOM_ARG(Conv1dOptions, int64_t, padding, 0)
  LOOM_ARG(Conv1dOptions, int64_t, dilation, 1)
  LOOM_ARG(Conv1dOptions, int64_t, groups, 1)
  LOOM_ARG(Conv1dOptions, bool, bias, true)
};

namespace functional {
struct Conv1dFuncOptions {
  LOOM_ARG(Conv1dFuncOptions, Tensor, bias, {})
  LOOM_ARG(Conv1dFuncOptions, int64_t, stride, 1)
  LOOM_ARG(Conv1dFuncOptions, int64_t, padding, 0)
  LOOM_ARG(Conv1dFuncOptions, int64_t, dilation, 1)
  LOOM_ARG(Conv1dFuncOptions, int64_t, groups, 1)
};
// input [N, C, L] (or [C, L]), weight [O, C / groups, k].
Tensor conv1d(const Tensor& input, const Tensor& weight, const Conv1dFuncOptions& options = {}, LOOM_LOC);

struct PadFuncOptions {
  PadFuncOptions(std::vector<int64_t> pad) : pad_(std::move(pad)) {}  // NOLINT: as libtorch
  // (left, right) of the last dim, then (top, bottom) of the one before, ...
  LOOM_ARG(PadFuncOptions, std::vector<int64_t>, pad, {})
  LOOM_ARG(PadFuncOptions, PadMode, mode, kConstant)
  LOOM_ARG(PadFuncOptions, double, value, 0)
};
// Constant pads may be negative (they crop); reflect needs pads below the
// dim's size, circular at most its size.
Tensor pad(const Tensor& input, const PadFuncOptions& options, LOOM_LOC);
}  // namespace functional

struct ConvTranspose2dOptions {
  ConvTranspose2dOptions(int64_t in_channels, int64_t out_channels, Pair kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  LOOM_ARG(ConvTranspose2dOptions, int64_t, in_channels, 0)
  LOOM_ARG(ConvTranspose2dOptions, int64_t, out_channels, 0)
  LOOM_ARG(ConvTranspose2dOptions, Pair, kernel_size, 1)
  LOOM_ARG(ConvTranspose2dOptions, Pair, stride, 1)
  LOOM_ARG(ConvTranspose2dOptions, Pair, padding, 0)
  LOOM_ARG(ConvTranspose2dOptions, Pair, output_padding, 0)
  LOOM_ARG(ConvTranspose2dOptions, Pair, dilation, 1)
  LOOM_ARG(ConvTranspose2dOptions, int64_t, groups, 1)
  LOOM_ARG(ConvTranspose2dOptions, bool, bias, true)
};

namespace functional {
struct ConvTranspose2dFuncOptions {
  LOOM_ARG(ConvTranspose2dFuncOptions, Tensor, bias, {})
  LOOM_ARG(ConvTranspose2dFuncOptions, Pair, stride, 1)
  LOOM_ARG(ConvTranspose2dFuncOptions, Pair, padding, 0)
  LOOM_ARG(ConvTranspose2dFuncOptions, Pair, output_padding, 0)
  LOOM_ARG(ConvTranspose2dFuncOptions, Pair, dilation, 1)
  LOOM_ARG(ConvTranspose2dFuncOptions, int64_t, groups, 1)
};
// input [N, C, H, W] (or [C, H, W]), weight [C, O / groups, kH, kW]; output height
// (H - 1) stride - 2 padding + dilation (kH - 1) + output_padding + 1.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const ConvTranspose2dFuncOptions& options = {},
                        LOOM_LOC);
}  // namespace functional

class ConvTranspose2dImpl : public Module {
 public:
  explicit ConvTranspose2dImpl(const ConvTranspose2dOptions& options);
  ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, Pair kernel_size)
      : ConvTranspose2dImpl(ConvTranspose2dOptions(in_channels, out_channels, kernel_size)) {}
  void reset_parameters();  // PyTorch's: fan_in from weight.size(1) * kH * kW
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  ConvTranspose2dOptions options;
  Tensor weight, bias;  // [in, out, kH, kW], [out]
};
LOOM_MODULE(ConvTranspose2d);

class Conv1dImpl : public Module {
 public:
  explicit Conv1dImpl(const Conv1dOptions& options);
  Conv1dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : Conv1dImpl(Conv1dOptions(in_channels, out_channels, kernel_size)) {}
  void reset_parameters();  // as Conv2d's, with fan_in = in_channels * k
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  Conv1dOptions options;
  Tensor weight, bias;  // [out, in, k], [out]
};
LOOM_MODULE(Conv1d);

}  // namespace nn
}  // namespace loom
#pragma GCC visibility pop
