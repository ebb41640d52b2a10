// Adam and AdamW: PyTorch's rules (single-tensor form), one function for both:
//   (AdamW) p *= 1 - lr * weight_decay
//   g = grad (negated if maximize) [(Adam) + weight_decay * p]
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
//   (amsgrad) v_max = max(v_max, v), used for v below
//   p += -(lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The bias corrections change every step: they are runtime scalars, so the
// graph (and its compiled form) stays the same, and a compiled replay
// computes them (and the learning rate's factors) anew for its step.
#include <loom/functions.h>
#include <loom/optim/adam.h>

#include <cmath>

namespace loom::optim {

namespace {

struct AdamRule {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled, amsgrad, maximize;
};
AdamRule rule_of(const AdamOptions& o) {
  return {o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(), o.weight_decay(), false, o.amsgrad(),
          o.maximize()};
}
AdamRule rule_of(const AdamWOptions& o) {
  return {o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(), o.weight_decay(), true, o.amsgrad(),
          o.maximize()};
}

// The numbers of step `step` that change with the step or the learning
// rate: a compiled replay computes them anew (Optimizer::replay_recomputes).
struct AdamNumbers {
  AdamRule r;
  double decay;                  // AdamW: 1 - lr * weight_decay
  double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  double neg_step_size;          // -lr / (1 - beta1^t)
};
AdamNumbers numbers_at(const AdamRule& r, int64_t step) {
  const double t = static_cast<double>(step);
  return {r, 1 - r.lr * r.weight_decay, std::sqrt(1 - std::pow(r.beta2, t)), -(r.lr / (1 - std::pow(r.beta1, t)))};
}
// The rest, which shape the graph or enter it as constants: what a
// compiled replay checks (replay_numbers).
bool fixed_numbers(const AdamRule& r, std::vector<double>& out) {
  out.assign({r.beta1, r.beta2, r.eps, r.weight_decay, double(r.decoupled), double(r.amsgrad), double(r.maximize)});
  return true;
}

// A number of AdamNumbers that a replay computes anew from the options then
// (an Optimizer::StepNumber; Options: AdamOptions or AdamWOptions).
template <double AdamNumbers::*field, class Options>
double recomputed(const OptimizerOptions& o, int64_t step) {
  return numbers_at(rule_of(static_cast<const Options&>(o)), step).*field;
}

std::unique_ptr<OptimizerParamState> adam_state(const Tensor& p, bool amsgrad) {
  auto s = std::make_unique<AdamParamState>();
  s->exp_avg = zeros_like(p);
  s->exp_avg_sq = zeros_like(p);
  if (amsgrad) s->max_exp_avg_sq = zeros_like(p);
  return s;
}

// `recompute` is the optimizer's replay_recomputes.
template <class Options, class Recompute>
void adam_update(Tensor& p, AdamParamState& s, const Options& o, const Recompute& recompute) {
  const AdamNumbers n = numbers_at(rule_of(o), s.step);
  const AdamRule& r = n.r;
  if (r.decoupled && r.weight_decay != 0) {
    p.mul_(n.decay);
    recompute(p, n.decay, &recomputed<&AdamNumbers::decay, Options>);
  }
  Tensor g = r.maximize ? p.grad().neg() : p.grad();
  if (!r.decoupled && r.weight_decay != 0) g = g + p * r.weight_decay;
  // lerp as PyTorch computes it (which form depends on the weight).
  const double w = 1 - r.beta1;
  if (w < 0.5) s.exp_avg.add_((g - s.exp_avg) * w);
  else s.exp_avg.copy_(g - (g - s.exp_avg) * (1 - w));
  s.exp_avg_sq.mul_(r.beta2).add_(g * g * (1 - r.beta2));
  Tensor second = s.exp_avg_sq;
  if (r.amsgrad) {
    if (!s.max_exp_avg_sq.defined()) s.max_exp_avg_sq = zeros_like(p);
    s.max_exp_avg_sq.copy_(maximum(s.max_exp_avg_sq, s.exp_avg_sq));
    second = s.max_exp_avg_sq;
  }
  Tensor scaled = second.sqrt() / n.bias_correction2_sqrt;
  recompute(scaled, n.bias_correction2_sqrt, &recomputed<&AdamNumbers::bias_correction2_sqrt, Options>);
  Tensor step = s.exp_avg / (scaled + r.eps) * n.neg_step_size;
  recompute(step, n.neg_step_size, &recomputed<&AdamNumbers::neg_step_size, Options>);
  p.add_(step);
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, options) {}
Adam::Adam(std::vector<OptimizerParamGroup> groups, const AdamOptions& options)
    : Optimizer(std::make_unique<AdamOptions>(options)) {
  for (const OptimizerParamGroup& g : groups) add_param_group(g);
}
std::unique_ptr<OptimizerParamState> Adam::make_state(const Tensor& p, const OptimizerOptions& options) {
  return adam_state(p, static_cast<const AdamOptions&>(options).amsgrad());
}
void Adam::update(Tensor& p, OptimizerParamState& state, const OptimizerOptions& options) {
  adam_update(p, static_cast<AdamParamState&>(state), static_cast<const AdamOptions&>(options),
              [this](const Tensor& t, double now, StepNumber of) { replay_recomputes(t, now, of); });
}
bool Adam::replay_numbers(const OptimizerOptions& options, std::vector<double>& out) const {
  return fixed_numbers(rule_of(static_cast<const AdamOptions&>(options)), out);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : AdamW(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, options) {}
AdamW::AdamW(std::vector<OptimizerParamGroup> groups, const AdamWOptions& options)
    : Optimizer(std::make_unique<AdamWOptions>(options)) {
  for (const OptimizerParamGroup& g : groups) add_param_group(g);
}
std::unique_ptr<OptimizerParamState> AdamW::make_state(const Tensor& p, const OptimizerOptions& options) {
  return adam_state(p, static_cast<const AdamWOptions&>(options).amsgrad());
}
void AdamW::update(Tensor& p, OptimizerParamState& state, const OptimizerOptions& options) {
  adam_update(p, static_cast<AdamParamState&>(state), static_cast<const AdamWOptions&>(options),
              [this](const Tensor& t, double now, StepNumber of) { replay_recomputes(t, now, of); });
}
bool AdamW::replay_numbers(const OptimizerOptions& options, std::vector<double>& out) const {
  return fixed_numbers(rule_of(static_cast<const AdamWOptions&>(options)), out);
}

std::vector<std::pair<std::string, Tensor*>> Adam::state_tensors(OptimizerParamState& state) {
  auto& s = static_cast<AdamParamState&>(state);
  return {{"exp_avg", &s.exp_avg}, {"exp_avg_sq", &s.exp_avg_sq}, {"max_exp_avg_sq", &s.max_exp_avg_sq}};
}

std::vector<std::pair<std::string, Tensor*>> AdamW::state_tensors(OptimizerParamState& state) {
  auto& s = static_cast<AdamParamState&>(state);
  return {{"exp_avg", &s.exp_avg}, {"exp_avg_sq", &s.exp_avg_sq}, {"max_exp_avg_sq", &s.max_exp_avg_sq}};
}

}  // namespace loom::optim
