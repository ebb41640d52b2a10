// SGD: PyTorch's rule (torch.optim.SGD, single-tensor form):
//   d_p = grad (negated if maximize) [+ weight_decay * p]
//   buf = d_p on the first step, else momentum * buf + (1 - dampening) * d_p
//   d_p = d_p + momentum * buf (nesterov) or buf
//   p  -= lr * d_p
// The buffer starts as zeros, and the first step uses the factors (0, 1):
// the same values as PyTorch's clone, but the same graph as later steps.
#include <loom/functions.h>
#include <loom/optim/sgd.h>

namespace loom::optim {

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : SGD(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, options) {}

SGD::SGD(std::vector<OptimizerParamGroup> groups, const SGDOptions& options)
    : Optimizer(std::make_unique<SGDOptions>(options)) {
  for (const OptimizerParamGroup& g : groups) add_param_group(g);
}

std::unique_ptr<OptimizerParamState> SGD::make_state(const Tensor& p, const OptimizerOptions& options) {
  auto s = std::make_unique<SGDParamState>();
  if (static_cast<const SGDOptions&>(options).momentum() != 0) s->momentum_buffer = zeros_like(p);
  return s;
}

void SGD::update(Tensor& p, OptimizerParamState& state, const OptimizerOptions& options) {
  const auto& o = static_cast<const SGDOptions&>(options);
  auto& s = static_cast<SGDParamState&>(state);
  Tensor d_p = o.maximize() ? p.grad().neg() : p.grad();
  if (o.weight_decay() != 0) d_p = d_p + p * o.weight_decay();
  if (o.momentum() != 0) {
    if (!s.momentum_buffer.defined()) s.momentum_buffer = zeros_like(p);  // momentum turned on later
    const bool first = s.step == 1;
    // Without dampening the factor of d_p is 1 on every step: no node for it.
    Tensor& buf = s.momentum_buffer.mul_(first ? 0.0 : o.momentum());
    if (o.dampening() == 0) buf.add_(d_p);
    else buf.add_(d_p * (first ? 1.0 : 1.0 - o.dampening()));
    d_p = o.nesterov() ? d_p + s.momentum_buffer * o.momentum() : s.momentum_buffer;
  }
  p.sub_(d_p * o.lr());
}

}  // namespace loom::optim
