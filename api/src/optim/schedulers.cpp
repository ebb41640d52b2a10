// The learning-rate schedulers of loom/optim/schedulers.h.
#include <loom/error.h>
#include <loom/optim/schedulers.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace loom::optim {

namespace {
std::vector<double> current_lrs(const Optimizer& optimizer) {
  std::vector<double> lrs;
  for (const OptimizerParamGroup& g : optimizer.param_groups()) lrs.push_back(g.options().get_lr());
  return lrs;
}
}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : base_lrs_(current_lrs(optimizer)), optimizer_(optimizer) {}

void LRScheduler::step() {
  set_optimizer_lrs(get_lrs());
  ++step_count_;
}

std::vector<double> LRScheduler::get_current_lrs() const { return current_lrs(optimizer_); }

void LRScheduler::set_optimizer_lrs(const std::vector<double>& learning_rates) {
  std::vector<OptimizerParamGroup>& groups = optimizer_.param_groups();
  if (learning_rates.size() != groups.size())
    throw Error("LRScheduler: " + std::to_string(learning_rates.size()) + " learning rates for " +
                std::to_string(groups.size()) + " parameter groups");
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(learning_rates[i]);
}

StepLR::StepLR(Optimizer& optimizer, unsigned step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  if (step_size == 0) throw Error("StepLR: step_size must be positive");
}

std::vector<double> StepLR::get_lrs() {
  std::vector<double> lrs = get_current_lrs();
  if (step_count_ != 0 && step_count_ % step_size_ == 0)
    for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {}

std::vector<double> MultiStepLR::get_lrs() {
  std::vector<double> lrs = get_current_lrs();
  // A milestone named twice decays twice, as PyTorch's Counter does.
  const auto hits = std::count(milestones_.begin(), milestones_.end(), static_cast<int64_t>(step_count_));
  for (double& lr : lrs) lr *= std::pow(gamma_, static_cast<double>(hits));
  return lrs;
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {}

std::vector<double> ExponentialLR::get_lrs() {
  std::vector<double> lrs = get_current_lrs();
  if (step_count_ != 0)
    for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  if (T_max <= 0) throw Error("CosineAnnealingLR: T_max must be positive");
}

std::vector<double> CosineAnnealingLR::get_lrs() {
  const double pi = std::acos(-1.0);
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(pi * step_count_ / static_cast<double>(t_max_))) / 2);
  return lrs;
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda)
    : LRScheduler(optimizer), lr_lambda_(std::move(lr_lambda)) {}

std::vector<double> LambdaLR::get_lrs() {
  const double f = lr_lambda_(static_cast<int64_t>(step_count_));
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * f);
  return lrs;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  if (start_factor <= 0 || start_factor > 1)
    throw Error("LinearLR: start_factor must be in (0, 1], got " + std::to_string(start_factor));
  if (total_iters <= 0) throw Error("LinearLR: total_iters must be positive");
}

std::vector<double> LinearLR::get_lrs() {
  const double t = std::min<double>(static_cast<double>(step_count_), static_cast<double>(total_iters_));
  const double f = start_factor_ + (end_factor_ - start_factor_) * t / static_cast<double>(total_iters_);
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * f);
  return lrs;
}

ReduceLROnPlateauScheduler::ReduceLROnPlateauScheduler(Optimizer& optimizer, SchedulerMode mode, float factor,
                                                       int patience, double threshold, ThresholdMode threshold_mode,
                                                       int cooldown, const std::vector<float>& min_lr, double eps,
                                                       bool verbose)
    : optimizer_(optimizer), mode_(mode), threshold_mode_(threshold_mode), factor_(factor), threshold_(threshold),
      eps_(eps), patience_(patience), cooldown_(cooldown),
      best_(mode == min ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity()),
      verbose_(verbose) {
  if (factor >= 1.0f) throw Error("ReduceLROnPlateauScheduler: factor must be below 1");
  const size_t groups = optimizer.param_groups().size();
  if (min_lr.empty()) min_lrs_.assign(groups, 0.0);
  else if (min_lr.size() == 1) min_lrs_.assign(groups, min_lr[0]);
  else if (min_lr.size() == groups) min_lrs_.assign(min_lr.begin(), min_lr.end());
  else
    throw Error("ReduceLROnPlateauScheduler: " + std::to_string(min_lr.size()) + " min_lr values for " +
                std::to_string(groups) + " parameter groups");
}

bool ReduceLROnPlateauScheduler::is_better(float metric) const {
  const double a = metric;
  if (mode_ == min) return threshold_mode_ == rel ? a < best_ * (1 - threshold_) : a < best_ - threshold_;
  return threshold_mode_ == rel ? a > best_ * (1 + threshold_) : a > best_ + threshold_;
}

void ReduceLROnPlateauScheduler::step(float metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ <= patience_) return;
  std::vector<OptimizerParamGroup>& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    const double old_lr = groups[i].options().get_lr();
    const double new_lr = std::max(old_lr * factor_, min_lrs_[i]);
    if (old_lr - new_lr > eps_) {
      groups[i].options().set_lr(new_lr);
      if (verbose_)
        std::printf("Epoch %lld: reducing learning rate of group %zu to %.4e.\n", static_cast<long long>(last_epoch_),
                    i, new_lr);
    }
  }
  cooldown_counter_ = cooldown_;
  num_bad_epochs_ = 0;
}

}  // namespace loom::optim
