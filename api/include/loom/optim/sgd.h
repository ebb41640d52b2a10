// SGD with momentum, dampening, Nesterov momentum and weight decay: PyTorch's
// update rule (torch.optim.SGD), as torch::optim::SGD / SGDOptions.
#pragma once
#include <loom/optim/optimizer.h>

#pragma GCC visibility push(default)
namespace loom::optim {

class SGDOptions : public OptimizerOptions {
 public:
  SGDOptions(double lr) : lr_(lr) {}  // NOLINT: as libtorch
  LOOM_ARG(SGDOptions, double, lr, 0)
  LOOM_ARG(SGDOptions, double, momentum, 0)
  LOOM_ARG(SGDOptions, double, dampening, 0)
  LOOM_ARG(SGDOptions, double, weight_decay, 0)
  LOOM_ARG(SGDOptions, bool, nesterov, false)
  LOOM_ARG(SGDOptions, bool, maximize, false)

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<SGDOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
};

struct SGDParamState : OptimizerParamState {
  Tensor momentum_buffer;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  SGD(std::vector<OptimizerParamGroup> groups, const SGDOptions& options);

 protected:
  void update(Tensor& p, OptimizerParamState& state, const OptimizerOptions& options) override;
  std::unique_ptr<OptimizerParamState> make_state(const Tensor& p, const OptimizerOptions& options) override;
  bool replay_numbers(const OptimizerOptions& options, std::vector<double>& out) const override;
  std::vector<std::pair<std::string, Tensor*>> state_tensors(OptimizerParamState& state) override;
};

}  // namespace loom::optim
#pragma GCC visibility pop
