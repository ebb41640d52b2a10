// RMSprop and Adagrad: PyTorch's update rules (torch.optim.RMSprop,
// torch.optim.Adagrad), as torch::optim's classes and options. Their
// numbers enter the step's graph as runtime scalars, like SGD's and Adam's.
#pragma once
#include <loom/optim/optimizer.h>

#pragma GCC visibility push(default)
namespace loom::optim {

class RMSpropOptions : public OptimizerOptions {
 public:
  RMSpropOptions(double lr = 1e-2) : lr_(lr) {}  // NOLINT: as libtorch
  LOOM_ARG(RMSpropOptions, double, lr, 1e-2)
  LOOM_ARG(RMSpropOptions, double, alpha, 0.99)
  LOOM_ARG(RMSpropOptions, double, eps, 1e-8)
  LOOM_ARG(RMSpropOptions, double, weight_decay, 0)
  LOOM_ARG(RMSpropOptions, double, momentum, 0)
  LOOM_ARG(RMSpropOptions, bool, centered, false)

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<RMSpropOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
};

struct RMSpropParamState : OptimizerParamState {
  Tensor square_avg, momentum_buffer, grad_avg;
};

// square_avg = alpha square_avg + (1 - alpha) g²; avg = sqrt(square_avg
// [- grad_avg²]) + eps; p -= lr g / avg (or through a momentum buffer).
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, const RMSpropOptions& options = {});
  RMSprop(std::vector<OptimizerParamGroup> groups, const RMSpropOptions& options = {});

 protected:
  void update(Tensor& p, OptimizerParamState& state, const OptimizerOptions& options) override;
  std::unique_ptr<OptimizerParamState> make_state(const Tensor& p, const OptimizerOptions& options) override;
  bool replay_numbers(const OptimizerOptions& options, std::vector<double>& out) const override;
  std::vector<std::pair<std::string, Tensor*>> state_tensors(OptimizerParamState& state) override;
};

class AdagradOptions : public OptimizerOptions {
 public:
  AdagradOptions(double lr = 1e-2) : lr_(lr) {}  // NOLINT: as libtorch
  LOOM_ARG(AdagradOptions, double, lr, 1e-2)
  LOOM_ARG(AdagradOptions, double, lr_decay, 0)
  LOOM_ARG(AdagradOptions, double, weight_decay, 0)
  LOOM_ARG(AdagradOptions, double, initial_accumulator_value, 0)
  LOOM_ARG(AdagradOptions, double, eps, 1e-10)

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<AdagradOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
};

struct AdagradParamState : OptimizerParamState {
  Tensor sum;
};

// sum += g²; p -= lr / (1 + (step - 1) lr_decay) · g / (sqrt(sum) + eps).
class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<Tensor> params, const AdagradOptions& options = {});
  Adagrad(std::vector<OptimizerParamGroup> groups, const AdagradOptions& options = {});

 protected:
  void update(Tensor& p, OptimizerParamState& state, const OptimizerOptions& options) override;
  std::unique_ptr<OptimizerParamState> make_state(const Tensor& p, const OptimizerOptions& options) override;
  bool replay_numbers(const OptimizerOptions& options, std::vector<double>& out) const override;
  std::vector<std::pair<std::string, Tensor*>> state_tensors(OptimizerParamState& state) override;
};

}  // namespace loom::optim
#pragma GCC visibility pop
