// Adam and AdamW: PyTorch's rules (single-tensor form), one function for both:
//   (AdamW) p *= 1 - lr * weight_decay
//   g = grad (negated if maximize) [(Adam) + weight_decay * p]
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
//   (amsgrad) v_max = max(v_max, v), used for v below
//   p += -(lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The bias corrections change every step: they are runtime scalars, so the
// graph (and its compiled form) stays the same.
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

// The step-dependent numbers of step `step`. One function for update() and
// replay_numbers(), so a compiled step checks exactly what it records.
struct AdamNumbers {
  AdamRule r;
  double step_size, bias_correction2_sqrt;
};
AdamNumbers numbers_at(const AdamRule& r, int64_t step) {
  const double t = static_cast<double>(step);
  return {r, r.lr / (1 - std::pow(r.beta1, t)), std::sqrt(1 - std::pow(r.beta2, t))};
}
bool as_list(const AdamNumbers& n, std::vector<double>& out) {
  const AdamRule& r = n.r;
  out.assign({r.lr, r.beta1, r.beta2, r.eps, r.weight_decay, double(r.decoupled), double(r.amsgrad), double(r.maximize),
              n.step_size, n.bias_correction2_sqrt});
  return true;
}

std::unique_ptr<OptimizerParamState> adam_state(const Tensor& p, bool amsgrad) {
  auto s = std::make_unique<AdamParamState>();
  s->exp_avg = zeros_like(p);
  s->exp_avg_sq = zeros_like(p);
  if (amsgrad) s->max_exp_avg_sq = zeros_like(p);
  return s;
}

void adam_update(Tensor& p, AdamParamState& s, const AdamNumbers& n) {
  const AdamRule& r = n.r;
  if (r.decoupled && r.weight_decay != 0) p.mul_(1 - r.lr * r.weight_decay);
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
  Tensor denom = second.sqrt() / n.bias_correction2_sqrt + r.eps;
  p.add_(s.exp_avg / denom * -n.step_size);
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
  adam_update(p, static_cast<AdamParamState&>(state),
              numbers_at(rule_of(static_cast<const AdamOptions&>(options)), state.step));
}
bool Adam::replay_numbers(const OptimizerOptions& options, int64_t step, std::vector<double>& out) const {
  return as_list(numbers_at(rule_of(static_cast<const AdamOptions&>(options)), step), out);
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
  adam_update(p, static_cast<AdamParamState&>(state),
              numbers_at(rule_of(static_cast<const AdamWOptions&>(options)), state.step));
}
bool AdamW::replay_numbers(const OptimizerOptions& options, int64_t step, std::vector<double>& out) const {
  return as_list(numbers_at(rule_of(static_cast<const AdamWOptions&>(options)), step), out);
}

}  // namespace loom::optim
