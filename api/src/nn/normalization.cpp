// loom/nn/normalization.h: batch, instance, group and RMS normalization,
// built from differentiable loom ops (mean, rsqrt, ...); the running
// statistics are in-place updates recorded under NoGradGuard.
#include <loom/autograd.h>
#include <loom/functions.h>
#include <loom/nn/init.h>
#include <loom/nn/normalization.h>

#include <limits>

#include "api/src/nn/shared.h"
#include "api/src/autocast.h"
#include "api/src/record.h"

namespace loom::nn {

namespace {

using detail::describe;

using shared::yes;

// [C] -> [1, C, 1, ...] for an input of `dims` dims.
Tensor per_channel(const Tensor& v, int64_t dims, const SourceLoc& loc) {
  std::vector<int64_t> shape(static_cast<size_t>(dims), 1);
  shape[1] = v.numel();
  return v.reshape(shape, loc);
}

// A per-channel weight or bias as [1, C, 1, ...] in x's dtype (undefined
// stays undefined).
Tensor channel_param(const Tensor& v, const Tensor& x, const SourceLoc& loc) {
  return v.defined() ? per_channel(v.to(x.dtype(), loc), x.dim(), loc) : Tensor();
}

// y * weight + bias, both [1, C, 1, ...] or undefined.
Tensor affine(Tensor y, const Tensor& weight, const Tensor& bias, const SourceLoc& loc) {
  if (weight.defined()) y = y.mul(weight, loc);
  if (bias.defined()) y = y.add(bias, 1, loc);
  return y;
}

// (x - running_mean) / sqrt(running_var + eps), per channel: evaluation
// with tracked statistics.
Tensor with_running_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, double eps,
                          const SourceLoc& loc) {
  const Tensor mean = per_channel(running_mean.to(x.dtype(), loc), x.dim(), loc);
  const Tensor var = per_channel(running_var.to(x.dtype(), loc), x.dim(), loc);
  return x.sub(mean, 1, loc).mul(var.add(eps, 1, loc).rsqrt(loc), loc);
}

// Statistics in float32 for a bfloat16 or float16 input (PyTorch's
// acc_type), the result rounded once.
bool low_precision(const Tensor& x) { return is_reduced_floating_point(x.dtype()); }

void check_channels(const Tensor& v, int64_t c, const char* what, const char* op, const SourceLoc& loc) {
  if (!v.defined()) return;
  LOOM_CHECK(v.dim() == 1 && v.size(0) == c, op, loc, what, " must have ", c, " elements (one per channel), got ",
             describe(v));
}

}  // namespace

namespace functional {

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const BatchNormFuncOptions& o, SourceLoc loc) {
  detail::impl_of(input, "batch_norm", loc);
  LOOM_CHECK(input.dim() >= 2, "batch_norm", loc, "expected an input of at least 2 dims [N, C, ...], got ",
             describe(input));
  const int64_t c = input.size(1);
  check_channels(running_mean, c, "running_mean", "batch_norm", loc);
  check_channels(running_var, c, "running_var", "batch_norm", loc);
  check_channels(o.weight(), c, "weight", "batch_norm", loc);
  check_channels(o.bias(), c, "bias", "batch_norm", loc);
  LOOM_CHECK(o.training() || (running_mean.defined() && running_var.defined()), "batch_norm", loc,
             "running_mean and running_var must be defined in evaluation mode");
  const Tensor x = low_precision(input) ? input.to(kFloat, loc) : input;
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Tensor y;
  if (o.training()) {
    const int64_t n = x.numel() / std::max<int64_t>(c, 1);
    LOOM_CHECK(n > 1, "batch_norm", loc, "expected more than 1 value per channel when training, got input ",
               describe(input));
    const auto [normalized, mean, var] =
        shared::normalize(x, dims, o.eps(), channel_param(o.weight(), x, loc), channel_param(o.bias(), x, loc),
                          "NativeBatchNormBackward0", loc);
    y = normalized;
    if (running_mean.defined()) {
      LOOM_CHECK(o.momentum().has_value(), "batch_norm", loc, "momentum must be set to update the running statistics");
      const double m = *o.momentum();
      NoGradGuard no_grad;
      const Tensor batch_mean = mean.detach().reshape({c}, loc).to(running_mean.dtype(), loc);
      const Tensor batch_var = var.detach().reshape({c}, loc).mul(static_cast<double>(n) / (n - 1), loc);
      Tensor rm = running_mean, rv = running_var;
      rm.mul_(1 - m, loc).add_(batch_mean.mul(m, loc), 1, loc);
      rv.mul_(1 - m, loc).add_(batch_var.to(running_var.dtype(), loc).mul(m, loc), 1, loc);
    }
  } else {
    y = affine(with_running_stats(x, running_mean, running_var, o.eps(), loc), channel_param(o.weight(), x, loc),
               channel_param(o.bias(), x, loc), loc);
  }
  return low_precision(input) ? y.to(input.dtype(), loc) : y;
}

Tensor instance_norm(const Tensor& input, const InstanceNormFuncOptions& o, SourceLoc loc) {
  detail::impl_of(input, "instance_norm", loc);
  LOOM_CHECK(input.dim() >= 3, "instance_norm", loc, "expected an input of at least 3 dims [N, C, ...], got ",
             describe(input));
  const int64_t c = input.size(1);
  check_channels(o.weight(), c, "weight", "instance_norm", loc);
  check_channels(o.bias(), c, "bias", "instance_norm", loc);
  const Tensor x = low_precision(input) ? input.to(kFloat, loc) : input;
  std::vector<int64_t> dims;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Tensor y;
  if (o.use_input_stats()) {
    const auto [normalized, mean, var] =
        shared::normalize(x, dims, o.eps(), channel_param(o.weight(), x, loc), channel_param(o.bias(), x, loc),
                          "NativeBatchNormBackward0", loc);
    y = normalized;
    if (o.running_mean().defined()) {
      // The running statistics follow the batch's average of the per-instance
      // mean and unbiased variance, as PyTorch's.
      int64_t n = 1;
      for (int64_t d : dims) n *= x.size(d);
      NoGradGuard no_grad;
      const double m = o.momentum();
      Tensor rm = o.running_mean(), rv = o.running_var();
      rm.mul_(1 - m, loc).add_(mean.detach().mean({0}, false, loc).reshape({c}, loc).mul(m, loc), 1, loc);
      rv.mul_(1 - m, loc).add_(
          var.detach().mean({0}, false, loc).reshape({c}, loc).mul(m * n / std::max<int64_t>(n - 1, 1), loc), 1, loc);
    }
  } else {
    LOOM_CHECK(o.running_mean().defined() && o.running_var().defined(), "instance_norm", loc,
               "running_mean and running_var must be defined when use_input_stats is false");
    y = affine(with_running_stats(x, o.running_mean(), o.running_var(), o.eps(), loc), channel_param(o.weight(), x, loc),
               channel_param(o.bias(), x, loc), loc);
  }
  return low_precision(input) ? y.to(input.dtype(), loc) : y;
}

Tensor group_norm(const Tensor& input, const GroupNormFuncOptions& o, SourceLoc loc) {
  detail::impl_of(input, "group_norm", loc);
  if (detail::autocast::wants_float(input)) return group_norm(input.to(kFloat, loc), o, loc);
  LOOM_CHECK(input.dim() >= 2, "group_norm", loc, "expected an input of at least 2 dims [N, C, ...], got ",
             describe(input));
  const int64_t n = input.size(0), c = input.size(1), g = o.num_groups();
  LOOM_CHECK(g > 0 && c % g == 0, "group_norm", loc, "expected the number of channels (", c,
             ") to be divisible by num_groups (", g, ")");
  check_channels(o.weight(), c, "weight", "group_norm", loc);
  check_channels(o.bias(), c, "bias", "group_norm", loc);
  const Tensor x = low_precision(input) ? input.to(kFloat, loc) : input;
  Tensor y = shared::normalize(x.reshape({n, g, -1}, loc), {2}, o.eps(), Tensor(), Tensor(), "NativeGroupNormBackward0",
                               loc)
                 .y.reshape(x.sizes(), loc);
  y = affine(y, channel_param(o.weight(), y, loc), channel_param(o.bias(), y, loc), loc);
  return low_precision(input) ? y.to(input.dtype(), loc) : y;
}

Tensor rms_norm(const Tensor& input, const RMSNormFuncOptions& o, SourceLoc loc) {
  detail::impl_of(input, "rms_norm", loc);
  const auto& shape = o.normalized_shape();
  const int64_t k = static_cast<int64_t>(shape.size());
  bool ok = k >= 1 && input.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = input.size(input.dim() - k + i) == shape[i];
  LOOM_CHECK(ok, "rms_norm", loc, "normalized_shape ", IntArrayRef(shape),
             " must match the trailing dims of the input ", describe(input));
  const double eps = o.eps().value_or(input.dtype() == kDouble     ? std::numeric_limits<double>::epsilon()
                                      : input.dtype() == kBFloat16 ? 0.0078125
                                      : input.dtype() == kHalf     ? 0.0009765625
                                                                   : std::numeric_limits<float>::epsilon());
  const Tensor x = low_precision(input) ? input.to(kFloat, loc) : input;
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < k; ++i) dims.push_back(x.dim() - k + i);
  Tensor y = x.mul(x.mul(x, loc).mean(dims, true, loc).add(eps, 1, loc).rsqrt(loc), loc);
  if (o.weight().defined()) y = y.mul(o.weight().to(y.dtype(), loc), loc);
  return low_precision(input) ? y.to(input.dtype(), loc) : y;
}

}  // namespace functional

// ---------------------------------------------------------------- BatchNorm
BatchNormImplBase::BatchNormImplBase(const BatchNormOptions& o) : options(o) {
  const int64_t c = o.num_features();
  if (o.affine()) {
    weight = register_parameter("weight", loom::empty({c}));
    bias = register_parameter("bias", loom::empty({c}));
  }
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", loom::zeros({c}));
    running_var = register_buffer("running_var", loom::ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", loom::zeros({}, kLong));
  }
  reset_parameters();
}

void BatchNormImplBase::reset_running_stats() {
  if (!options.track_running_stats()) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void BatchNormImplBase::reset_parameters() {
  reset_running_stats();
  if (!options.affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor BatchNormImplBase::forward(const Tensor& input, SourceLoc loc) {
  detail::impl_of(input, "BatchNorm", loc);
  check_input(input, loc);
  std::optional<double> momentum = options.momentum();
  const bool tracking = options.track_running_stats();
  if (is_training() && tracking) {
    {
      NoGradGuard no_grad;
      num_batches_tracked.add_(1, 1, loc);
    }
    if (!momentum) momentum = 1.0 / num_batches_tracked.item<double>(loc);  // a cumulative average
  }
  return functional::batch_norm(input, running_mean, running_var,
                                functional::BatchNormFuncOptions()
                                    .weight(weight)
                                    .bias(bias)
                                    .training(is_training() || !tracking)
                                    .momentum(momentum)
                                    .eps(options.eps()),
                                loc);
}

void BatchNormImplBase::print(std::ostream& os, const char* name) const {
  os << name << "(" << options.num_features() << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum()) os << *options.momentum();
  else os << "None";
  os << ", affine=" << yes(options.affine()) << ", track_running_stats=" << yes(options.track_running_stats()) << ")";
}

void BatchNorm1dImpl::check_input(const Tensor& input, const SourceLoc& loc) const {
  LOOM_CHECK(input.dim() == 2 || input.dim() == 3, "BatchNorm1d", loc, "expected 2D or 3D input, got ",
             describe(input));
}

void BatchNorm2dImpl::check_input(const Tensor& input, const SourceLoc& loc) const {
  LOOM_CHECK(input.dim() == 4, "BatchNorm2d", loc, "expected 4D input [N, C, H, W], got ", describe(input));
}

// ---------------------------------------------------------------- InstanceNorm2d
InstanceNorm2dImpl::InstanceNorm2dImpl(const InstanceNormOptions& o) : options(o) {
  const int64_t c = o.num_features();
  if (o.affine()) {
    weight = register_parameter("weight", loom::ones({c}));
    bias = register_parameter("bias", loom::zeros({c}));
  }
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", loom::zeros({c}));
    running_var = register_buffer("running_var", loom::ones({c}));
  }
}

Tensor InstanceNorm2dImpl::forward(const Tensor& input, SourceLoc loc) {
  detail::impl_of(input, "InstanceNorm2d", loc);
  LOOM_CHECK(input.dim() == 3 || input.dim() == 4, "InstanceNorm2d", loc, "expected 3D or 4D input, got ",
             describe(input));
  const Tensor x = input.dim() == 3 ? input.unsqueeze(0, loc) : input;
  // Batch statistics while training or when none are tracked; tracked ones
  // are updated in training and used in eval, as PyTorch's.
  functional::InstanceNormFuncOptions f;
  f.weight(weight).bias(bias).momentum(options.momentum()).eps(options.eps());
  f.use_input_stats(is_training() || !options.track_running_stats());
  if (options.track_running_stats()) f.running_mean(running_mean).running_var(running_var);
  const Tensor y = functional::instance_norm(x, f, loc);
  return input.dim() == 3 ? y.squeeze(0, loc) : y;
}

void InstanceNorm2dImpl::pretty_print(std::ostream& os) const {
  os << "InstanceNorm2d(" << options.num_features() << ", eps=" << options.eps() << ", momentum=" << options.momentum()
     << ", affine=" << yes(options.affine()) << ", track_running_stats=" << yes(options.track_running_stats()) << ")";
}

// ---------------------------------------------------------------- GroupNorm
GroupNormImpl::GroupNormImpl(const GroupNormOptions& o) : options(o) {
  LOOM_CHECK(o.num_groups() > 0 && o.num_channels() % o.num_groups() == 0, "GroupNorm", SourceLoc::current(),
             "num_channels (", o.num_channels(), ") must be divisible by num_groups (", o.num_groups(), ")");
  if (o.affine()) {
    weight = register_parameter("weight", loom::ones({o.num_channels()}));
    bias = register_parameter("bias", loom::zeros({o.num_channels()}));
  }
}

Tensor GroupNormImpl::forward(const Tensor& input, SourceLoc loc) {
  return functional::group_norm(
      input, functional::GroupNormFuncOptions(options.num_groups()).weight(weight).bias(bias).eps(options.eps()), loc);
}

void GroupNormImpl::pretty_print(std::ostream& os) const {
  os << "GroupNorm(" << options.num_groups() << ", " << options.num_channels() << ", eps=" << options.eps()
     << ", affine=" << yes(options.affine()) << ")";
}

// ---------------------------------------------------------------- RMSNorm
RMSNormImpl::RMSNormImpl(const RMSNormOptions& o) : options(o) {
  if (o.elementwise_affine()) weight = register_parameter("weight", loom::ones(o.normalized_shape()));
}

Tensor RMSNormImpl::forward(const Tensor& input, SourceLoc loc) {
  return functional::rms_norm(
      input, functional::RMSNormFuncOptions(options.normalized_shape()).weight(weight).eps(options.eps()), loc);
}

void RMSNormImpl::pretty_print(std::ostream& os) const {
  os << "RMSNorm(" << IntArrayRef(options.normalized_shape()) << ", eps=";
  if (options.eps()) os << *options.eps();
  else os << "None";
  os << ", elementwise_affine=" << yes(options.elementwise_affine()) << ")";
}

}  // namespace loom::nn
