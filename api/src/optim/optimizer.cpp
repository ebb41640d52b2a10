// Optimizer: groups, state, zero_grad, and step() as one recorded update
// followed by a sync (see loom/optim/optimizer.h).
#include <loom/autograd.h>
#include <loom/optim.h>
#include <loom/runtime.h>

#include "api/src/record.h"

namespace loom::optim {

Optimizer::Optimizer(std::unique_ptr<OptimizerOptions> defaults) : defaults_(std::move(defaults)) {}

Optimizer::~Optimizer() = default;

void Optimizer::adopt(OptimizerParamGroup& group) {
  const SourceLoc loc = SourceLoc::current();
  for (Tensor& p : group.params()) {
    detail::impl_of(p, "optimizer", loc);
    LOOM_CHECK(p.is_floating_point(), "optimizer", loc, "can only optimize floating-point tensors, got ",
               detail::describe(p));
    LOOM_CHECK(p.is_leaf(), "optimizer", loc, "can't optimize a non-leaf tensor (", detail::describe(p),
               ", made by ", p.grad_fn()->name(), "); optimize the leaf it was computed from");
    auto& slot = state_[p.impl().get()];
    LOOM_CHECK(!slot, "optimizer", loc, "a parameter (", detail::describe(p),
               ") appears in more than one parameter group (or twice in one)");
    slot = make_state(p, group.options());
  }
}

void Optimizer::add_param_group(const OptimizerParamGroup& group) {
  OptimizerParamGroup g = group;
  if (!g.has_options()) g.set_options(defaults_->clone());
  adopt(g);
  groups_.push_back(std::move(g));
  // Parameters and state are values from here on, not pending graphs, so
  // every step records the same graph (and replays one executable).
  sync_all();
}

Tensor Optimizer::step(LossClosure closure) {
  Tensor loss;
  if (closure) {
    AutoGradMode enabled(true);
    loss = closure();
  }
  {
    NoGradGuard no_grad;
    for (OptimizerParamGroup& g : groups_)
      for (Tensor& p : g.params()) {
        if (!p.grad().defined()) continue;  // as PyTorch: a parameter without a gradient is left alone
        OptimizerParamState& st = *state_.at(p.impl().get());
        ++st.step;
        update(p, st, g.options());
      }
  }
  if (sync_on_step_) sync_all();
  return loss;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (OptimizerParamGroup& g : groups_)
    for (Tensor& p : g.params()) {
      Tensor& grad = p.mutable_grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        grad = Tensor();
        continue;
      }
      NoGradGuard no_grad;
      grad.detach_();
      grad.zero_();
    }
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> all;
  for (const OptimizerParamGroup& g : groups_) all.insert(all.end(), g.params().begin(), g.params().end());
  return all;
}

size_t Optimizer::size() const {
  size_t n = 0;
  for (const OptimizerParamGroup& g : groups_) n += g.params().size();
  return n;
}

}  // namespace loom::optim
