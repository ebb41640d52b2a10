// The functions libtorch has at the top level (ATen's signatures:
// positional arguments, Reduction as the last but one), so that
// torch::nll_loss(x, y) or torch::max_pool2d(x, 2) port unchanged. Each is
// the nn::functional function of the same name with these arguments as its
// options.
#pragma once
#include <optional>

#include <loom/nn/functional.h>

#pragma GCC visibility push(default)
namespace loom {

Tensor nll_loss(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight = std::nullopt,
                Reduction reduction = kMean, int64_t ignore_index = -100, LOOM_LOC);
Tensor cross_entropy_loss(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight = std::nullopt,
                          Reduction reduction = kMean, int64_t ignore_index = -100, double label_smoothing = 0.0,
                          LOOM_LOC);
Tensor binary_cross_entropy(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight = std::nullopt,
                            Reduction reduction = kMean, LOOM_LOC);
Tensor mse_loss(const Tensor& self, const Tensor& target, Reduction reduction = kMean, LOOM_LOC);
Tensor l1_loss(const Tensor& self, const Tensor& target, Reduction reduction = kMean, LOOM_LOC);
Tensor smooth_l1_loss(const Tensor& self, const Tensor& target, Reduction reduction = kMean, double beta = 1.0,
                      LOOM_LOC);
// kernel_size, stride (empty: the kernel size), padding and dilation: one
// value for both spatial dims, or two.
Tensor max_pool2d(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = 0,
                  IntArrayRef dilation = 1, bool ceil_mode = false, LOOM_LOC);
Tensor dropout(const Tensor& input, double p, bool train, LOOM_LOC);
Tensor flatten(const Tensor& self, int64_t start_dim = 0, int64_t end_dim = -1, LOOM_LOC);
Tensor reshape(const Tensor& self, IntArrayRef shape, LOOM_LOC);

}  // namespace loom
#pragma GCC visibility pop
