// L-BFGS, as torch::optim::LBFGS / LBFGSOptions: PyTorch's algorithm
// (torch/optim/lbfgs.py) step for step, with its optional strong-Wolfe line
// search. step(closure) evaluates the loss and gradient up to max_eval
// times; the direction and step size come from numbers read on the host
// each iteration (dot products, the loss), as PyTorch's do, so each
// evaluation is its own graph: L-BFGS is for small, full-batch problems.
#pragma once
#include <deque>
#include <optional>
#include <string>

#include <loom/optim/optimizer.h>

#pragma GCC visibility push(default)
namespace loom::optim {

class LBFGSOptions : public OptimizerOptions {
 public:
  LBFGSOptions(double lr = 1) : lr_(lr) {}  // NOLINT: as libtorch
  LOOM_ARG(LBFGSOptions, double, lr, 1)
  LOOM_ARG(LBFGSOptions, int64_t, max_iter, 20)
  LOOM_ARG(LBFGSOptions, std::optional<int64_t>, max_eval, std::nullopt)  // max_iter * 5 / 4 when unset
  LOOM_ARG(LBFGSOptions, double, tolerance_grad, 1e-7)
  LOOM_ARG(LBFGSOptions, double, tolerance_change, 1e-9)
  LOOM_ARG(LBFGSOptions, int64_t, history_size, 100)
  LOOM_ARG(LBFGSOptions, std::optional<std::string>, line_search_fn, std::nullopt)  // "strong_wolfe" or none

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<LBFGSOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
};

class LBFGS : public Optimizer {
 public:
  LBFGS(std::vector<Tensor> params, const LBFGSOptions& options = {});
  LBFGS(std::vector<OptimizerParamGroup> groups, const LBFGSOptions& options = {});
  // `closure` clears the gradients, computes the loss, calls backward and
  // returns the loss; required. Returns the first evaluation's loss.
  Tensor step(LossClosure closure) override;

  // The state PyTorch keeps between steps (one for all parameters).
  struct History {
    int64_t func_evals = 0, n_iter = 0;
    Tensor d, prev_flat_grad;
    double t = 0, h_diag = 1, prev_loss = 0;
    std::deque<Tensor> old_dirs, old_stps;
    std::deque<double> ro;
  };
  const History& history() const { return history_; }

 protected:
  void update(Tensor& p, OptimizerParamState& state, const OptimizerOptions& options) override;
  std::unique_ptr<OptimizerParamState> make_state(const Tensor& p, const OptimizerOptions& options) override;

 private:
  Tensor flat_grad() const;
  void add_to_params(double step, const Tensor& direction);
  std::vector<Tensor> clone_params() const;
  void set_params(const std::vector<Tensor>& values);
  // The loss and flat gradient at params + t d, the params put back after.
  std::pair<double, Tensor> evaluate_at(const LossClosure& closure, const std::vector<Tensor>& x, double t,
                                        const Tensor& d);
  std::vector<Tensor>& params();
  History history_;
};

}  // namespace loom::optim
#pragma GCC visibility pop
