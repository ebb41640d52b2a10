// loom::nn::functional (usually `namespace F = loom::nn::functional;`), as
// torch::nn::functional: activations, dropout, normalization, convolution,
// pooling and the losses. Each is built from differentiable loom ops.
#pragma once
#include <tuple>

#include <loom/functions.h>
#include <loom/nn/options.h>

#pragma GCC visibility push(default)
// Whether conv2d (and conv1d, conv_transpose2d, the Conv modules) records
// the fused Conv2d op (on by default) or im2col and a product, the role of
// torch.backends.cudnn.enabled. On the CPU the fused op also needs
// enable_fused_conv_on_cpu(true): off by default, because im2col and the
// generated GEMM kernels measure faster there today.
namespace loom::backends {
void enable_fused_conv(bool enabled);
bool fused_conv_enabled();
void enable_fused_conv_on_cpu(bool enabled);
bool fused_conv_on_cpu_enabled();
}  // namespace loom::backends

namespace loom::nn::functional {

Tensor relu(const Tensor& x, LOOM_LOC);
Tensor gelu(const Tensor& x, const GELUFuncOptions& options = {}, LOOM_LOC);
Tensor tanh(const Tensor& x, LOOM_LOC);
Tensor sigmoid(const Tensor& x, LOOM_LOC);
Tensor silu(const Tensor& x, LOOM_LOC);
Tensor softmax(const Tensor& x, int64_t dim, LOOM_LOC);
Tensor log_softmax(const Tensor& x, int64_t dim, LOOM_LOC);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, LOOM_LOC);
Tensor embedding(const Tensor& indices, const Tensor& weight, LOOM_LOC);

// Zeroes each element with probability p and scales the rest by 1/(1-p),
// when training. The mask comes from loom's counter-based generator
// (Philox): manual_seed makes it reproducible, and its seed and offset are
// runtime scalars, so a new mask every step does not recompile.
Tensor dropout(const Tensor& x, const DropoutFuncOptions& options = {}, LOOM_LOC);
// Over the trailing normalized_shape dims: mean and biased variance.
Tensor layer_norm(const Tensor& x, const LayerNormFuncOptions& options, LOOM_LOC);
// input [N, C, H, W] (or [C, H, W]), weight [O, C / groups, kH, kW]: one
// fused Conv2d op (an implicit GEMM on every backend, no im2col tensor)
// where backends::fused_conv_enabled(), else im2col and one product.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Conv2dFuncOptions& options = {}, LOOM_LOC);
Tensor max_pool2d(const Tensor& input, const MaxPool2dFuncOptions& options, LOOM_LOC);
// The pooled values and, for each, the flat index (row * W + column) of
// the first maximum in its input plane, as PyTorch's.
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const MaxPool2dFuncOptions& options, LOOM_LOC);
Tensor avg_pool2d(const Tensor& input, const AvgPool2dFuncOptions& options, LOOM_LOC);
Tensor adaptive_avg_pool2d(const Tensor& input, const AdaptiveAvgPool2dFuncOptions& options, LOOM_LOC);
Tensor adaptive_max_pool2d(const Tensor& input, const AdaptiveMaxPool2dFuncOptions& options, LOOM_LOC);

// ---- losses (input, target); reductions as PyTorch's
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossFuncOptions& options = {}, LOOM_LOC);
Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossFuncOptions& options = {}, LOOM_LOC);
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const SmoothL1LossFuncOptions& options = {}, LOOM_LOC);
Tensor huber_loss(const Tensor& input, const Tensor& target, const HuberLossFuncOptions& options = {}, LOOM_LOC);
// input: logits [N, C] (or [C]); target: class indices [N] (int64), or
// class probabilities shaped as input.
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyFuncOptions& options = {}, LOOM_LOC);
// input: log-probabilities [N, C]; target: class indices [N].
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossFuncOptions& options = {}, LOOM_LOC);
// input: probabilities in [0, 1].
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const BinaryCrossEntropyFuncOptions& options = {}, LOOM_LOC);
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BinaryCrossEntropyWithLogitsFuncOptions& options = {}, LOOM_LOC);
// input: log-probabilities; target: probabilities (log-probabilities with log_target).
Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivFuncOptions& options = {}, LOOM_LOC);

}  // namespace loom::nn::functional
#pragma GCC visibility pop
