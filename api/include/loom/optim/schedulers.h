// Learning-rate schedulers, as torch::optim's: each step() sets the
// learning rate of every parameter group of its optimizer. The learning
// rate is a runtime scalar of the training step's graph (optimizer.h), so
// a schedule never recompiles the step.
//
// libtorch's convention, kept by every scheduler here: the k-th call of
// step() (k = 0, 1, ...) sets the rate of epoch k, so the first call leaves
// the optimizer's rate as it is. StepLR and ReduceLROnPlateauScheduler are
// libtorch's; MultiStepLR, ExponentialLR, CosineAnnealingLR, LambdaLR and
// LinearLR (a warm-up) are PyTorch's, with PyTorch's formulas.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <loom/optim/optimizer.h>

#pragma GCC visibility push(default)
namespace loom::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  void step();

 protected:
  // The rates of epoch step_count_, one per parameter group.
  virtual std::vector<double> get_lrs() = 0;
  std::vector<double> get_current_lrs() const;
  unsigned step_count_ = 0;
  // The groups' rates when the scheduler was made (PyTorch's initial_lr).
  std::vector<double> base_lrs_;

 private:
  void set_optimizer_lrs(const std::vector<double>& learning_rates);
  Optimizer& optimizer_;
};

// Every step_size epochs, the rate times gamma.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, unsigned step_size, double gamma = 0.1);

 private:
  std::vector<double> get_lrs() override;
  unsigned step_size_;
  double gamma_;
};

// At each milestone epoch, the rate times gamma.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 private:
  std::vector<double> get_lrs() override;
  std::vector<int64_t> milestones_;
  double gamma_;
};

// Every epoch, the rate times gamma.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 private:
  std::vector<double> get_lrs() override;
  double gamma_;
};

// eta_min + (base - eta_min) (1 + cos(pi epoch / T_max)) / 2.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 private:
  std::vector<double> get_lrs() override;
  int64_t t_max_;
  double eta_min_;
};

// base * lr_lambda(epoch).
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda);

 private:
  std::vector<double> get_lrs() override;
  std::function<double(int64_t)> lr_lambda_;
};

// base times a factor going linearly from start_factor to end_factor over
// total_iters epochs, then end_factor: a warm-up.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

 private:
  std::vector<double> get_lrs() override;
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// libtorch's: the rate times factor once the metric has not improved for
// more than `patience` epochs, then `cooldown` epochs of rest.
class ReduceLROnPlateauScheduler {
 public:
  enum SchedulerMode { min, max };
  enum ThresholdMode { rel, abs };
  ReduceLROnPlateauScheduler(Optimizer& optimizer, SchedulerMode mode = min, float factor = 0.1, int patience = 10,
                             double threshold = 1e-4, ThresholdMode threshold_mode = rel, int cooldown = 0,
                             const std::vector<float>& min_lr = {}, double eps = 1e-8, bool verbose = false);
  virtual ~ReduceLROnPlateauScheduler() = default;
  void step(float metric);

 private:
  bool is_better(float metric) const;
  Optimizer& optimizer_;
  SchedulerMode mode_;
  ThresholdMode threshold_mode_;
  double factor_, threshold_, eps_;
  int patience_, cooldown_, cooldown_counter_ = 0, num_bad_epochs_ = 0;
  std::vector<double> min_lrs_;
  double best_;
  int64_t last_epoch_ = 0;
  bool verbose_;
};
using ReduceLROnPlateau = ReduceLROnPlateauScheduler;

}  // namespace loom::optim
#pragma GCC visibility pop
