// Options of the nn layers, functions and losses, with libtorch's names and
// chainable setters: LinearOptions(784, 10).bias(false),
// CrossEntropyLossOptions().label_smoothing(0.1).reduction(loom::kSum).
// A functional form takes the same class (F::MSELossFuncOptions is
// MSELossOptions, as in libtorch).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <loom/arg.h>
#include <loom/tensor.h>

#pragma GCC visibility push(default)
namespace loom {

// How a loss reduces its elements (torch::kMean, kSum, kNone; kBatchMean for kl_div).
enum class Reduction { None, Mean, Sum, BatchMean };
inline constexpr Reduction kNone = Reduction::None;
inline constexpr Reduction kMean = Reduction::Mean;
inline constexpr Reduction kSum = Reduction::Sum;
inline constexpr Reduction kBatchMean = Reduction::BatchMean;

namespace nn {

// ---- layers
struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  LOOM_ARG(LinearOptions, int64_t, in_features, 0)
  LOOM_ARG(LinearOptions, int64_t, out_features, 0)
  LOOM_ARG(LinearOptions, bool, bias, true)
};

struct GELUOptions {
  LOOM_ARG(GELUOptions, std::string, approximate, "none")
};

struct ReLUOptions {
  ReLUOptions(bool inplace = false) : inplace_(inplace) {}  // NOLINT: as libtorch
  LOOM_ARG(ReLUOptions, bool, inplace, false)
};

struct DropoutOptions {
  DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT: as libtorch
  LOOM_ARG(DropoutOptions, double, p, 0.5)
};

struct LayerNormOptions {
  LayerNormOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  LOOM_ARG(LayerNormOptions, std::vector<int64_t>, normalized_shape, {})
  LOOM_ARG(LayerNormOptions, double, eps, 1e-5)
  LOOM_ARG(LayerNormOptions, bool, elementwise_affine, true)
};

struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  LOOM_ARG(EmbeddingOptions, int64_t, num_embeddings, 0)
  LOOM_ARG(EmbeddingOptions, int64_t, embedding_dim, 0)
  // Rows at this index are zero and get no gradient.
  LOOM_ARG(EmbeddingOptions, std::optional<int64_t>, padding_idx, std::nullopt)
};

// Sizes of the two spatial dims; one number means both (ExpandingArray<2>).
struct Pair {
  Pair(int64_t v) : h(v), w(v) {}  // NOLINT: as ExpandingArray
  Pair(std::initializer_list<int64_t> l) : h(*l.begin()), w(*(l.begin() + (l.size() > 1))) {}
  int64_t h, w;
};

struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, Pair kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  LOOM_ARG(Conv2dOptions, int64_t, in_channels, 0)
  LOOM_ARG(Conv2dOptions, int64_t, out_channels, 0)
  LOOM_ARG(Conv2dOptions, Pair, kernel_size, 1)
  LOOM_ARG(Conv2dOptions, Pair, stride, 1)
  LOOM_ARG(Conv2dOptions, Pair, padding, 0)
  LOOM_ARG(Conv2dOptions, Pair, dilation, 1)
  LOOM_ARG(Conv2dOptions, int64_t, groups, 1)
  LOOM_ARG(Conv2dOptions, bool, bias, true)
};

struct MaxPool2dOptions {
  MaxPool2dOptions(Pair kernel_size) : kernel_size_(kernel_size) {}  // NOLINT
  LOOM_ARG(MaxPool2dOptions, Pair, kernel_size, 1)
  // Defaults to kernel_size, as in libtorch.
  LOOM_ARG(MaxPool2dOptions, std::optional<Pair>, stride, std::nullopt)
  LOOM_ARG(MaxPool2dOptions, Pair, padding, 0)
  LOOM_ARG(MaxPool2dOptions, Pair, dilation, 1)
  // The output size rounded up: a last window may start in the input and
  // end past its padding (it takes the max of what it covers).
  LOOM_ARG(MaxPool2dOptions, bool, ceil_mode, false)
};

struct AvgPool2dOptions {
  AvgPool2dOptions(Pair kernel_size) : kernel_size_(kernel_size) {}  // NOLINT
  LOOM_ARG(AvgPool2dOptions, Pair, kernel_size, 1)
  LOOM_ARG(AvgPool2dOptions, std::optional<Pair>, stride, std::nullopt)
  LOOM_ARG(AvgPool2dOptions, Pair, padding, 0)
  LOOM_ARG(AvgPool2dOptions, bool, ceil_mode, false)
  // Whether the zeros of the padding count in a window's divisor.
  LOOM_ARG(AvgPool2dOptions, bool, count_include_pad, true)
  LOOM_ARG(AvgPool2dOptions, std::optional<int64_t>, divisor_override, std::nullopt)
};

// The output's [H, W]; cell (i, j) pools rows floor(i H / oh) to
// ceil((i + 1) H / oh), as PyTorch's adaptive pooling.
struct AdaptiveAvgPool2dOptions {
  AdaptiveAvgPool2dOptions(Pair output_size) : output_size_(output_size) {}  // NOLINT
  LOOM_ARG(AdaptiveAvgPool2dOptions, Pair, output_size, 1)
};
using AdaptiveMaxPool2dOptions = AdaptiveAvgPool2dOptions;

struct FlattenOptions {
  LOOM_ARG(FlattenOptions, int64_t, start_dim, 1)
  LOOM_ARG(FlattenOptions, int64_t, end_dim, -1)
};

// ---- losses
struct MSELossOptions {
  MSELossOptions(Reduction r = kMean) : reduction_(r) {}  // NOLINT
  LOOM_ARG(MSELossOptions, Reduction, reduction, kMean)
};
using L1LossOptions = MSELossOptions;

struct SmoothL1LossOptions {
  SmoothL1LossOptions(Reduction r = kMean) : reduction_(r) {}  // NOLINT
  LOOM_ARG(SmoothL1LossOptions, Reduction, reduction, kMean)
  LOOM_ARG(SmoothL1LossOptions, double, beta, 1.0)
};

struct HuberLossOptions {
  HuberLossOptions(Reduction r = kMean) : reduction_(r) {}  // NOLINT
  LOOM_ARG(HuberLossOptions, Reduction, reduction, kMean)
  LOOM_ARG(HuberLossOptions, double, delta, 1.0)
};

struct CrossEntropyLossOptions {
  CrossEntropyLossOptions(Reduction r = kMean) : reduction_(r) {}  // NOLINT
  LOOM_ARG(CrossEntropyLossOptions, Reduction, reduction, kMean)
  LOOM_ARG(CrossEntropyLossOptions, Tensor, weight, {})
  LOOM_ARG(CrossEntropyLossOptions, int64_t, ignore_index, -100)
  LOOM_ARG(CrossEntropyLossOptions, double, label_smoothing, 0.0)
};

struct NLLLossOptions {
  NLLLossOptions(Reduction r = kMean) : reduction_(r) {}  // NOLINT
  LOOM_ARG(NLLLossOptions, Reduction, reduction, kMean)
  LOOM_ARG(NLLLossOptions, Tensor, weight, {})
  LOOM_ARG(NLLLossOptions, int64_t, ignore_index, -100)
};

struct BCELossOptions {
  BCELossOptions(Reduction r = kMean) : reduction_(r) {}  // NOLINT
  LOOM_ARG(BCELossOptions, Reduction, reduction, kMean)
  LOOM_ARG(BCELossOptions, Tensor, weight, {})
};

struct BCEWithLogitsLossOptions {
  BCEWithLogitsLossOptions(Reduction r = kMean) : reduction_(r) {}  // NOLINT
  LOOM_ARG(BCEWithLogitsLossOptions, Reduction, reduction, kMean)
  LOOM_ARG(BCEWithLogitsLossOptions, Tensor, weight, {})
  LOOM_ARG(BCEWithLogitsLossOptions, Tensor, pos_weight, {})
};

struct KLDivLossOptions {
  KLDivLossOptions(Reduction r = kMean) : reduction_(r) {}  // NOLINT
  LOOM_ARG(KLDivLossOptions, Reduction, reduction, kMean)
  LOOM_ARG(KLDivLossOptions, bool, log_target, false)
};

namespace functional {
// ---- options of the functional forms
struct DropoutFuncOptions {
  LOOM_ARG(DropoutFuncOptions, double, p, 0.5)
  LOOM_ARG(DropoutFuncOptions, bool, training, true)
};
struct LayerNormFuncOptions {
  LayerNormFuncOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  LOOM_ARG(LayerNormFuncOptions, std::vector<int64_t>, normalized_shape, {})
  LOOM_ARG(LayerNormFuncOptions, Tensor, weight, {})
  LOOM_ARG(LayerNormFuncOptions, Tensor, bias, {})
  LOOM_ARG(LayerNormFuncOptions, double, eps, 1e-5)
};
struct Conv2dFuncOptions {
  LOOM_ARG(Conv2dFuncOptions, Tensor, bias, {})
  LOOM_ARG(Conv2dFuncOptions, Pair, stride, 1)
  LOOM_ARG(Conv2dFuncOptions, Pair, padding, 0)
  LOOM_ARG(Conv2dFuncOptions, Pair, dilation, 1)
  LOOM_ARG(Conv2dFuncOptions, int64_t, groups, 1)
};
using MaxPool2dFuncOptions = MaxPool2dOptions;
using AvgPool2dFuncOptions = AvgPool2dOptions;
using AdaptiveAvgPool2dFuncOptions = AdaptiveAvgPool2dOptions;
using AdaptiveMaxPool2dFuncOptions = AdaptiveAvgPool2dOptions;
struct GELUFuncOptions {
  LOOM_ARG(GELUFuncOptions, std::string, approximate, "none")
};
using MSELossFuncOptions = MSELossOptions;
using L1LossFuncOptions = L1LossOptions;
using SmoothL1LossFuncOptions = SmoothL1LossOptions;
using HuberLossFuncOptions = HuberLossOptions;
using CrossEntropyFuncOptions = CrossEntropyLossOptions;
using NLLLossFuncOptions = NLLLossOptions;
using BinaryCrossEntropyFuncOptions = BCELossOptions;
using BinaryCrossEntropyWithLogitsFuncOptions = BCEWithLogitsLossOptions;
using KLDivFuncOptions = KLDivLossOptions;
}  // namespace functional

}  // namespace nn
}  // namespace loom
#pragma GCC visibility pop
