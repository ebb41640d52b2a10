// loom::nn::utils, as torch::nn::utils: gradient clipping.
#pragma once
#include <initializer_list>
#include <vector>

#include <loom/tensor.h>

#pragma GCC visibility push(default)
namespace loom::nn::utils {

// Scales the gradients of `parameters` in place so that their joint
// norm_type-norm is at most max_norm (by max_norm / (norm + 1e-6), never
// up), and returns that norm before clipping, as libtorch's does: returning
// a double reads it, so the call syncs (the gradients and the norm are
// computed there). Parameters without a gradient are skipped. norm_type may
// be INFINITY (the largest |g|). With error_if_nonfinite, a NaN or infinite
// norm throws loom::Error and leaves the gradients unscaled.
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false, LOOM_LOC);
double clip_grad_norm_(std::initializer_list<Tensor> parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false, LOOM_LOC);
double clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false, LOOM_LOC);

// The two halves of clip_grad_norm_, as PyTorch (2.6 on) names them, for a
// step that never reads the norm on the host: get_total_norm returns the
// joint norm_type-norm of `tensors` (usually the gradients) as a 0-d float32
// tensor, still pending; clip_grads_with_norm_ scales the gradients of
// `parameters` by max_norm / (total_norm + 1e-6) where that is below 1, as
// recorded ops, so clipping and the optimizer's update land in one graph.
Tensor get_total_norm(const std::vector<Tensor>& tensors, double norm_type = 2.0, bool error_if_nonfinite = false,
                      LOOM_LOC);
void clip_grads_with_norm_(const std::vector<Tensor>& parameters, double max_norm, const Tensor& total_norm, LOOM_LOC);

// Clamps every gradient element of `parameters` to [-clip_value, clip_value]
// in place (recorded: nothing is computed until the next sync).
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value, LOOM_LOC);
void clip_grad_value_(std::initializer_list<Tensor> parameters, double clip_value, LOOM_LOC);
void clip_grad_value_(const Tensor& parameter, double clip_value, LOOM_LOC);

}  // namespace loom::nn::utils
#pragma GCC visibility pop
