// RMSprop and Adagrad, PyTorch's single-tensor rules (see the header).
#include <loom/functions.h>
#include <loom/optim/rmsprop_adagrad.h>

namespace loom::optim {

namespace {
double rmsprop_lr(const OptimizerOptions& o, int64_t) { return static_cast<const RMSpropOptions&>(o).lr(); }
double adagrad_clr(const OptimizerOptions& o, int64_t step) {
  const auto& a = static_cast<const AdagradOptions&>(o);
  return a.lr() / (1 + static_cast<double>(step - 1) * a.lr_decay());
}
}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, const RMSpropOptions& options)
    : RMSprop(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, options) {}

RMSprop::RMSprop(std::vector<OptimizerParamGroup> groups, const RMSpropOptions& options)
    : Optimizer(std::make_unique<RMSpropOptions>(options)) {
  for (const OptimizerParamGroup& g : groups) add_param_group(g);
}

std::unique_ptr<OptimizerParamState> RMSprop::make_state(const Tensor& p, const OptimizerOptions& options) {
  const auto& o = static_cast<const RMSpropOptions&>(options);
  auto s = std::make_unique<RMSpropParamState>();
  s->square_avg = zeros_like(p);
  if (o.momentum() > 0) s->momentum_buffer = zeros_like(p);
  if (o.centered()) s->grad_avg = zeros_like(p);
  return s;
}

void RMSprop::update(Tensor& p, OptimizerParamState& state, const OptimizerOptions& options) {
  auto& s = static_cast<RMSpropParamState&>(state);
  const auto& o = static_cast<const RMSpropOptions&>(options);
  Tensor g = p.grad();
  if (o.weight_decay() != 0) g = g + p * o.weight_decay();
  s.square_avg.mul_(o.alpha()).add_(g * g * (1 - o.alpha()));
  Tensor avg;
  if (o.centered()) {
    if (!s.grad_avg.defined()) s.grad_avg = zeros_like(p);
    s.grad_avg.mul_(o.alpha()).add_(g * (1 - o.alpha()));
    avg = (s.square_avg - s.grad_avg * s.grad_avg).sqrt() + o.eps();
  } else {
    avg = s.square_avg.sqrt() + o.eps();
  }
  Tensor direction = g / avg;
  if (o.momentum() > 0) {
    if (!s.momentum_buffer.defined()) s.momentum_buffer = zeros_like(p);
    s.momentum_buffer.mul_(o.momentum()).add_(direction);
    direction = s.momentum_buffer;
  }
  Tensor step = direction * o.lr();
  replay_recomputes(step, o.lr(), rmsprop_lr);
  p.sub_(step);
}

bool RMSprop::replay_numbers(const OptimizerOptions& options, std::vector<double>& out) const {
  const auto& o = static_cast<const RMSpropOptions&>(options);
  out.assign({o.alpha(), o.eps(), o.weight_decay(), o.momentum(), double(o.centered())});
  return true;
}

Adagrad::Adagrad(std::vector<Tensor> params, const AdagradOptions& options)
    : Adagrad(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, options) {}

Adagrad::Adagrad(std::vector<OptimizerParamGroup> groups, const AdagradOptions& options)
    : Optimizer(std::make_unique<AdagradOptions>(options)) {
  for (const OptimizerParamGroup& g : groups) add_param_group(g);
}

std::unique_ptr<OptimizerParamState> Adagrad::make_state(const Tensor& p, const OptimizerOptions& options) {
  auto s = std::make_unique<AdagradParamState>();
  s->sum = full_like(p, static_cast<const AdagradOptions&>(options).initial_accumulator_value());
  return s;
}

void Adagrad::update(Tensor& p, OptimizerParamState& state, const OptimizerOptions& options) {
  auto& s = static_cast<AdagradParamState&>(state);
  const auto& o = static_cast<const AdagradOptions&>(options);
  Tensor g = p.grad();
  if (o.weight_decay() != 0) g = g + p * o.weight_decay();
  const double clr = adagrad_clr(o, s.step);
  s.sum.add_(g * g);
  Tensor step = g / (s.sum.sqrt() + o.eps()) * clr;
  replay_recomputes(step, clr, adagrad_clr);
  p.sub_(step);
}

bool Adagrad::replay_numbers(const OptimizerOptions& options, std::vector<double>& out) const {
  const auto& o = static_cast<const AdagradOptions&>(options);
  out.assign({o.lr_decay(), o.weight_decay(), o.eps()});
  return true;
}

std::vector<std::pair<std::string, Tensor*>> RMSprop::state_tensors(OptimizerParamState& state) {
  auto& s = static_cast<RMSpropParamState&>(state);
  return {{"square_avg", &s.square_avg}, {"momentum_buffer", &s.momentum_buffer}, {"grad_avg", &s.grad_avg}};
}

std::vector<std::pair<std::string, Tensor*>> Adagrad::state_tensors(OptimizerParamState& state) {
  auto& s = static_cast<AdagradParamState&>(state);
  return {{"sum", &s.sum}};
}

}  // namespace loom::optim
