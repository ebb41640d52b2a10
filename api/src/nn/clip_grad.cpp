// Gradient clipping (libtorch's torch/nn/utils/clip_grad.h).
#include <loom/nn/utils.h>

#include <cmath>

#include <loom/autograd.h>
#include <loom/functions.h>

namespace loom::nn::utils {

Tensor get_total_norm(const std::vector<Tensor>& tensors, double norm_type, bool error_if_nonfinite, SourceLoc loc) {
  NoGradGuard no_grad;
  // Each tensor's part (its largest |g|, or its sum of |g|^p) folded into
  // one 0-d total by a chain of scalar ops, and the root taken once: the
  // same norm as the norm of the stacked per-tensor norms, without a
  // concatenation of as many scalars as there are tensors (a copy launch
  // each on a GPU).
  Tensor total;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    const Tensor g = t.data();
    Tensor part;
    if (std::isinf(norm_type)) part = g.abs(loc).max(loc).to(kFloat, loc);
    else if (norm_type == 2) part = g.to(kFloat, loc).square(loc).sum(loc);
    else if (norm_type == 1) part = g.to(kFloat, loc).abs(loc).sum(loc);
    else if (norm_type == 0) part = g.ne(0, loc).to(kFloat, loc).sum(loc);  // how many are nonzero
    else part = g.to(kFloat, loc).abs(loc).pow(norm_type, loc).sum(loc);
    total = !total.defined() ? part : std::isinf(norm_type) ? loom::maximum(total, part, loc) : total.add(part, 1, loc);
  }
  if (!total.defined()) return loom::zeros({}, kFloat, loc);
  if (!std::isinf(norm_type) && norm_type != 1 && norm_type != 0)
    total = norm_type == 2 ? total.sqrt(loc) : total.pow(1.0 / norm_type, loc);
  if (error_if_nonfinite) {
    const double n = total.item<double>(loc);
    LOOM_CHECK(std::isfinite(n), "clip_grad_norm_", loc, "the total norm of order ", norm_type,
               " for gradients from `parameters` is non-finite (", n,
               "), so it cannot be clipped. To disable this error and scale the gradients by the non-finite norm "
               "anyway, set `error_if_nonfinite=false`");
  }
  return total;
}

void clip_grads_with_norm_(const std::vector<Tensor>& parameters, double max_norm, const Tensor& total_norm,
                           SourceLoc loc) {
  NoGradGuard no_grad;
  const Tensor coef = (max_norm / (total_norm + 1e-6)).clamp(std::nullopt, 1.0, loc);
  for (const Tensor& p : parameters)
    if (p.defined() && p.grad().defined()) {
      Tensor g = p.grad().data();
      g.mul_(coef.to(g.dtype(), loc), loc);
    }
}

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite, SourceLoc loc) {
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  const Tensor total = get_total_norm(grads, norm_type, error_if_nonfinite, loc);
  clip_grads_with_norm_(parameters, max_norm, total, loc);
  return total.item<double>(loc);
}

double clip_grad_norm_(std::initializer_list<Tensor> parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite, SourceLoc loc) {
  return clip_grad_norm_(std::vector<Tensor>(parameters), max_norm, norm_type, error_if_nonfinite, loc);
}

double clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type, bool error_if_nonfinite,
                       SourceLoc loc) {
  return clip_grad_norm_(std::vector<Tensor>{parameter}, max_norm, norm_type, error_if_nonfinite, loc);
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value, SourceLoc loc) {
  NoGradGuard no_grad;
  for (const Tensor& p : parameters)
    if (p.defined() && p.grad().defined()) p.grad().data().clamp_(-clip_value, clip_value, loc);
}

void clip_grad_value_(std::initializer_list<Tensor> parameters, double clip_value, SourceLoc loc) {
  clip_grad_value_(std::vector<Tensor>(parameters), clip_value, loc);
}

void clip_grad_value_(const Tensor& parameter, double clip_value, SourceLoc loc) {
  clip_grad_value_(std::vector<Tensor>{parameter}, clip_value, loc);
}

}  // namespace loom::nn::utils
