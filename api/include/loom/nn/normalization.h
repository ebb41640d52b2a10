// Normalization layers, as torch::nn's: BatchNorm1d/2d (batch statistics
// while training, running statistics in eval), InstanceNorm2d, GroupNorm,
// RMSNorm; their options and functional forms.
//
// BatchNorm's running statistics are buffers updated in place inside the
// training step's graph (momentum is a runtime scalar), so a training step
// stays one graph compiled once; with momentum unset (a cumulative average)
// each step reads num_batches_tracked on the host, as libtorch does.
#pragma once
#include <optional>
#include <vector>

#include <loom/arg.h>
#include <loom/nn/module.h>

#pragma GCC visibility push(default)
namespace loom::nn {

struct BatchNormOptions {
  BatchNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT: as libtorch
  LOOM_ARG(BatchNormOptions, int64_t, num_features, 0)
  LOOM_ARG(BatchNormOptions, double, eps, 1e-5)
  // nullopt: a cumulative moving average (1 / batches seen).
  LOOM_ARG(BatchNormOptions, std::optional<double>, momentum, 0.1)
  LOOM_ARG(BatchNormOptions, bool, affine, true)
  LOOM_ARG(BatchNormOptions, bool, track_running_stats, true)
};
using BatchNorm1dOptions = BatchNormOptions;
using BatchNorm2dOptions = BatchNormOptions;

struct InstanceNormOptions {
  InstanceNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT
  LOOM_ARG(InstanceNormOptions, int64_t, num_features, 0)
  LOOM_ARG(InstanceNormOptions, double, eps, 1e-5)
  LOOM_ARG(InstanceNormOptions, double, momentum, 0.1)
  LOOM_ARG(InstanceNormOptions, bool, affine, false)
  LOOM_ARG(InstanceNormOptions, bool, track_running_stats, false)
};
using InstanceNorm2dOptions = InstanceNormOptions;

struct GroupNormOptions {
  GroupNormOptions(int64_t num_groups, int64_t num_channels) : num_groups_(num_groups), num_channels_(num_channels) {}
  LOOM_ARG(GroupNormOptions, int64_t, num_groups, 1)
  LOOM_ARG(GroupNormOptions, int64_t, num_channels, 1)
  LOOM_ARG(GroupNormOptions, double, eps, 1e-5)
  LOOM_ARG(GroupNormOptions, bool, affine, true)
};

struct RMSNormOptions {
  RMSNormOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  LOOM_ARG(RMSNormOptions, std::vector<int64_t>, normalized_shape, {})
  // nullopt: the machine epsilon of the input's dtype, as PyTorch.
  LOOM_ARG(RMSNormOptions, std::optional<double>, eps, std::nullopt)
  LOOM_ARG(RMSNormOptions, bool, elementwise_affine, true)
};

namespace functional {

struct BatchNormFuncOptions {
  LOOM_ARG(BatchNormFuncOptions, Tensor, weight, {})
  LOOM_ARG(BatchNormFuncOptions, Tensor, bias, {})
  LOOM_ARG(BatchNormFuncOptions, bool, training, false)
  LOOM_ARG(BatchNormFuncOptions, std::optional<double>, momentum, 0.1)
  LOOM_ARG(BatchNormFuncOptions, double, eps, 1e-5)
};
struct InstanceNormFuncOptions {
  LOOM_ARG(InstanceNormFuncOptions, Tensor, running_mean, {})
  LOOM_ARG(InstanceNormFuncOptions, Tensor, running_var, {})
  LOOM_ARG(InstanceNormFuncOptions, Tensor, weight, {})
  LOOM_ARG(InstanceNormFuncOptions, Tensor, bias, {})
  LOOM_ARG(InstanceNormFuncOptions, bool, use_input_stats, true)
  LOOM_ARG(InstanceNormFuncOptions, double, momentum, 0.1)
  LOOM_ARG(InstanceNormFuncOptions, double, eps, 1e-5)
};
struct GroupNormFuncOptions {
  GroupNormFuncOptions(int64_t num_groups) : num_groups_(num_groups) {}  // NOLINT
  LOOM_ARG(GroupNormFuncOptions, int64_t, num_groups, 1)
  LOOM_ARG(GroupNormFuncOptions, Tensor, weight, {})
  LOOM_ARG(GroupNormFuncOptions, Tensor, bias, {})
  LOOM_ARG(GroupNormFuncOptions, double, eps, 1e-5)
};
struct RMSNormFuncOptions {
  RMSNormFuncOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  LOOM_ARG(RMSNormFuncOptions, std::vector<int64_t>, normalized_shape, {})
  LOOM_ARG(RMSNormFuncOptions, Tensor, weight, {})
  LOOM_ARG(RMSNormFuncOptions, std::optional<double>, eps, std::nullopt)
};

// input [N, C, ...]: statistics per channel over every other dim. In
// training, running_mean and running_var (when defined) move toward the
// batch's mean and unbiased variance by momentum, in place.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const BatchNormFuncOptions& options = {}, LOOM_LOC);
// Statistics per sample and channel over the spatial dims.
Tensor instance_norm(const Tensor& input, const InstanceNormFuncOptions& options = {}, LOOM_LOC);
// Statistics per sample and group of C / num_groups channels.
Tensor group_norm(const Tensor& input, const GroupNormFuncOptions& options, LOOM_LOC);
// x / sqrt(mean(x^2 over the trailing dims) + eps) * weight.
Tensor rms_norm(const Tensor& input, const RMSNormFuncOptions& options, LOOM_LOC);

}  // namespace functional

// The shared part of BatchNorm1d and BatchNorm2d: parameters weight (1) and
// bias (0); buffers running_mean (0), running_var (1), num_batches_tracked.
class BatchNormImplBase : public Module {
 public:
  explicit BatchNormImplBase(const BatchNormOptions& options);
  void reset_running_stats();
  void reset_parameters();
  Tensor forward(const Tensor& input, LOOM_LOC);
  BatchNormOptions options;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 protected:
  virtual void check_input(const Tensor& input, const SourceLoc& loc) const = 0;
  void print(std::ostream& os, const char* name) const;
};

// Input [N, C] or [N, C, L].
class BatchNorm1dImpl : public BatchNormImplBase {
 public:
  using BatchNormImplBase::BatchNormImplBase;
  void pretty_print(std::ostream& os) const override { print(os, "BatchNorm1d"); }

 private:
  void check_input(const Tensor& input, const SourceLoc& loc) const override;
};
LOOM_MODULE(BatchNorm1d);

// Input [N, C, H, W].
class BatchNorm2dImpl : public BatchNormImplBase {
 public:
  using BatchNormImplBase::BatchNormImplBase;
  void pretty_print(std::ostream& os) const override { print(os, "BatchNorm2d"); }

 private:
  void check_input(const Tensor& input, const SourceLoc& loc) const override;
};
LOOM_MODULE(BatchNorm2d);

// Input [N, C, H, W] or [C, H, W].
class InstanceNorm2dImpl : public Module {
 public:
  explicit InstanceNorm2dImpl(const InstanceNormOptions& options);
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  InstanceNormOptions options;
  Tensor weight, bias, running_mean, running_var;
};
LOOM_MODULE(InstanceNorm2d);

class GroupNormImpl : public Module {
 public:
  explicit GroupNormImpl(const GroupNormOptions& options);
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  GroupNormOptions options;
  Tensor weight, bias;
};
LOOM_MODULE(GroupNorm);

class RMSNormImpl : public Module {
 public:
  explicit RMSNormImpl(const RMSNormOptions& options);
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  RMSNormOptions options;
  Tensor weight;
};
LOOM_MODULE(RMSNorm);

}  // namespace loom::nn
#pragma GCC visibility pop
