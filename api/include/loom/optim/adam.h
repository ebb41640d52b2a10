// Adam and AdamW: PyTorch's update rules (torch.optim.Adam / AdamW, amsgrad
// included), as torch::optim::Adam / AdamOptions and AdamW / AdamWOptions.
#pragma once
#include <tuple>

#include <loom/optim/optimizer.h>

#pragma GCC visibility push(default)
namespace loom::optim {

class AdamOptions : public OptimizerOptions {
 public:
  AdamOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: as libtorch
  using Betas = std::tuple<double, double>;
  LOOM_ARG(AdamOptions, double, lr, 1e-3)
  LOOM_ARG(AdamOptions, Betas, betas, (Betas{0.9, 0.999}))
  LOOM_ARG(AdamOptions, double, eps, 1e-8)
  LOOM_ARG(AdamOptions, double, weight_decay, 0)
  LOOM_ARG(AdamOptions, bool, amsgrad, false)
  LOOM_ARG(AdamOptions, bool, maximize, false)

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<AdamOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
};

// As AdamOptions; weight decay is decoupled (applied to the parameter) and defaults to 1e-2.
class AdamWOptions : public OptimizerOptions {
 public:
  AdamWOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: as libtorch
  using Betas = std::tuple<double, double>;
  LOOM_ARG(AdamWOptions, double, lr, 1e-3)
  LOOM_ARG(AdamWOptions, Betas, betas, (Betas{0.9, 0.999}))
  LOOM_ARG(AdamWOptions, double, eps, 1e-8)
  LOOM_ARG(AdamWOptions, double, weight_decay, 1e-2)
  LOOM_ARG(AdamWOptions, bool, amsgrad, false)
  LOOM_ARG(AdamWOptions, bool, maximize, false)

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<AdamWOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
};

struct AdamParamState : OptimizerParamState {
  Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  Adam(std::vector<OptimizerParamGroup> groups, const AdamOptions& options = {});

 protected:
  void update(Tensor& p, OptimizerParamState& state, const OptimizerOptions& options) override;
  std::unique_ptr<OptimizerParamState> make_state(const Tensor& p, const OptimizerOptions& options) override;
  bool replay_numbers(const OptimizerOptions& options, std::vector<double>& out) const override;
  std::vector<std::pair<std::string, Tensor*>> state_tensors(OptimizerParamState& state) override;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
  AdamW(std::vector<OptimizerParamGroup> groups, const AdamWOptions& options = {});

 protected:
  void update(Tensor& p, OptimizerParamState& state, const OptimizerOptions& options) override;
  std::unique_ptr<OptimizerParamState> make_state(const Tensor& p, const OptimizerOptions& options) override;
  bool replay_numbers(const OptimizerOptions& options, std::vector<double>& out) const override;
  std::vector<std::pair<std::string, Tensor*>> state_tensors(OptimizerParamState& state) override;
};

}  // namespace loom::optim
#pragma GCC visibility pop
