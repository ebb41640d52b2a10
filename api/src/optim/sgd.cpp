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

namespace {
// What SGD's update of one parameter records at step `step`. One function
// for update(), replay_numbers() and a replay's recomputed numbers, so a
// compiled step replays exactly what the plain one records.
struct SgdNumbers {
  double lr;            // a replay computes these three anew (replay_recomputes)
  double buffer_scale;  // the momentum buffer's factor: 0 on the first step (PyTorch clones d_p)
  double grad_scale;    // d_p's factor in the buffer: 1 on the first step, else 1 - dampening
  double weight_decay, momentum;  // and checks the rest (replay_numbers)
  bool maximize, nesterov, dampened;
};
SgdNumbers sgd_numbers(const SGDOptions& o, int64_t step) {
  const bool first = step == 1;
  return {o.lr(),       first ? 0.0 : o.momentum(), first ? 1.0 : 1.0 - o.dampening(), o.weight_decay(), o.momentum(),
          o.maximize(), o.nesterov(),               o.dampening() != 0};
}
// A number a replay computes anew (an Optimizer::StepNumber).
template <double SgdNumbers::*field>
double recomputed(const OptimizerOptions& o, int64_t step) {
  return sgd_numbers(static_cast<const SGDOptions&>(o), step).*field;
}
}  // namespace

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
  auto& s = static_cast<SGDParamState&>(state);
  const SgdNumbers n = sgd_numbers(static_cast<const SGDOptions&>(options), s.step);
  Tensor d_p = n.maximize ? p.grad().neg() : p.grad();
  if (n.weight_decay != 0) d_p = d_p + p * n.weight_decay;
  if (n.momentum != 0) {
    if (!s.momentum_buffer.defined()) s.momentum_buffer = zeros_like(p);  // momentum turned on later
    Tensor& buf = s.momentum_buffer.mul_(n.buffer_scale);
    replay_recomputes(buf, n.buffer_scale, recomputed<&SgdNumbers::buffer_scale>);
    // Without dampening the factor of d_p is 1 on every step: no node for it.
    if (!n.dampened) {
      buf.add_(d_p);
    } else {
      Tensor scaled = d_p * n.grad_scale;
      replay_recomputes(scaled, n.grad_scale, recomputed<&SgdNumbers::grad_scale>);
      buf.add_(scaled);
    }
    d_p = n.nesterov ? d_p + s.momentum_buffer * n.momentum : s.momentum_buffer;
  }
  Tensor step = d_p * n.lr;
  replay_recomputes(step, n.lr, recomputed<&SgdNumbers::lr>);
  p.sub_(step);
}

bool SGD::replay_numbers(const OptimizerOptions& options, std::vector<double>& out) const {
  // The numbers a replay keeps are the same at every step.
  const SgdNumbers n = sgd_numbers(static_cast<const SGDOptions&>(options), /*step=*/1);
  out.assign({n.weight_decay, n.momentum, double(n.maximize), double(n.nesterov), double(n.dampened)});
  return true;
}

std::vector<std::pair<std::string, Tensor*>> SGD::state_tensors(OptimizerParamState& state) {
  auto& s = static_cast<SGDParamState&>(state);
  return {{"momentum_buffer", &s.momentum_buffer}};
}

}  // namespace loom::optim
