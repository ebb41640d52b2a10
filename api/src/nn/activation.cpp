// loom/nn/activation.h: each activation as loom ops, with PyTorch's
// formulas and constants.
#include <loom/functions.h>
#include <loom/nn/activation.h>
#include <loom/nn/functional.h>

#include "api/src/autocast.h"
#include "api/src/record.h"

namespace loom::nn {

namespace functional {

namespace {
// Writes y into x when asked to (libtorch's inplace), else returns y.
Tensor maybe_inplace(const Tensor& x, const Tensor& y, bool inplace, const SourceLoc& loc) {
  if (!inplace) return y;
  Tensor out = x;
  out.copy_(y, loc);
  return out;
}
Tensor relu6_shifted(const Tensor& x, const SourceLoc& loc) {  // relu6(x + 3) / 6
  return loom::clamp(x.add(3, 1, loc), 0, 6, loc).div(6, loc);
}
}  // namespace

Tensor leaky_relu(const Tensor& x, const LeakyReLUFuncOptions& o, SourceLoc loc) {
  detail::impl_of(x, "leaky_relu", loc);
  return maybe_inplace(x, loom::where(x.gt(0, loc), x, x.mul(o.negative_slope(), loc), loc), o.inplace(), loc);
}

Tensor elu(const Tensor& x, const ELUFuncOptions& o, SourceLoc loc) {
  detail::impl_of(x, "elu", loc);
  return maybe_inplace(x, loom::where(x.gt(0, loc), x, loom::expm1(x, loc).mul(o.alpha(), loc), loc), o.inplace(), loc);
}

Tensor selu(const Tensor& x, const SELUFuncOptions& o, SourceLoc loc) {
  detail::impl_of(x, "selu", loc);
  const double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  const Tensor y = loom::where(x.gt(0, loc), x, loom::expm1(x, loc).mul(alpha, loc), loc).mul(scale, loc);
  return maybe_inplace(x, y, o.inplace(), loc);
}

Tensor celu(const Tensor& x, const CELUFuncOptions& o, SourceLoc loc) {
  detail::impl_of(x, "celu", loc);
  LOOM_CHECK(o.alpha() != 0, "celu", loc, "alpha cannot be 0");
  const Tensor y = loom::where(x.gt(0, loc), x, loom::expm1(x.div(o.alpha(), loc), loc).mul(o.alpha(), loc), loc);
  return maybe_inplace(x, y, o.inplace(), loc);
}

Tensor softplus(const Tensor& x, const SoftplusFuncOptions& o, SourceLoc loc) {
  detail::impl_of(x, "softplus", loc);
  if (detail::autocast::wants_float(x)) return softplus(x.to(kFloat, loc), o, loc);
  const Tensor bx = x.mul(o.beta(), loc);
  // exp of a value past the threshold is never taken: the clamp keeps the
  // unused branch (and its gradient) finite.
  const Tensor soft = loom::log1p(loom::exp(loom::clamp(bx, std::nullopt, o.threshold(), loc), loc), loc).div(o.beta(), loc);
  return loom::where(bx.gt(o.threshold(), loc), x, soft, loc);
}

Tensor hardswish(const Tensor& x, SourceLoc loc) {
  detail::impl_of(x, "hardswish", loc);
  return x.mul(relu6_shifted(x, loc), loc);
}

Tensor hardsigmoid(const Tensor& x, SourceLoc loc) {
  detail::impl_of(x, "hardsigmoid", loc);
  return relu6_shifted(x, loc);
}

Tensor mish(const Tensor& x, SourceLoc loc) {
  detail::impl_of(x, "mish", loc);
  return x.mul(loom::tanh(softplus(x, {}, loc), loc), loc);
}

Tensor prelu(const Tensor& x, const Tensor& weight, SourceLoc loc) {
  detail::impl_of(x, "prelu", loc);
  detail::impl_of(weight, "prelu", loc);
  Tensor w = weight;
  if (weight.numel() != 1) {
    LOOM_CHECK(x.dim() >= 2 && weight.dim() == 1 && weight.size(0) == x.size(1), "prelu", loc,
               "weight has ", weight.numel(), " elements but the input has ", x.dim() >= 2 ? x.size(1) : 1,
               " channels (dim 1): ", detail::describe(x));
    std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
    shape[1] = weight.size(0);
    w = weight.reshape(shape, loc);
  } else {
    w = weight.reshape({}, loc);
  }
  return loom::where(x.gt(0, loc), x, x.mul(w, loc), loc);
}

Tensor softmax(const Tensor& x, const SoftmaxFuncOptions& o, SourceLoc loc) { return softmax(x, o.dim(), loc); }
Tensor log_softmax(const Tensor& x, const LogSoftmaxFuncOptions& o, SourceLoc loc) {
  return log_softmax(x, o.dim(), loc);
}

}  // namespace functional

Tensor LeakyReLUImpl::forward(const Tensor& input, SourceLoc loc) { return functional::leaky_relu(input, options, loc); }
void LeakyReLUImpl::pretty_print(std::ostream& os) const {
  os << "LeakyReLU(negative_slope=" << options.negative_slope() << (options.inplace() ? ", inplace=true" : "") << ")";
}
Tensor ELUImpl::forward(const Tensor& input, SourceLoc loc) { return functional::elu(input, options, loc); }
void ELUImpl::pretty_print(std::ostream& os) const {
  os << "ELU(alpha=" << options.alpha() << (options.inplace() ? ", inplace=true" : "") << ")";
}
Tensor SELUImpl::forward(const Tensor& input, SourceLoc loc) { return functional::selu(input, options, loc); }
void SELUImpl::pretty_print(std::ostream& os) const { os << "SELU(" << (options.inplace() ? "inplace=true" : "") << ")"; }
Tensor CELUImpl::forward(const Tensor& input, SourceLoc loc) { return functional::celu(input, options, loc); }
void CELUImpl::pretty_print(std::ostream& os) const {
  os << "CELU(alpha=" << options.alpha() << (options.inplace() ? ", inplace=true" : "") << ")";
}
Tensor SoftplusImpl::forward(const Tensor& input, SourceLoc loc) { return functional::softplus(input, options, loc); }
void SoftplusImpl::pretty_print(std::ostream& os) const {
  os << "Softplus(beta=" << options.beta() << ", threshold=" << options.threshold() << ")";
}
Tensor HardswishImpl::forward(const Tensor& input, SourceLoc loc) { return functional::hardswish(input, loc); }
Tensor HardsigmoidImpl::forward(const Tensor& input, SourceLoc loc) { return functional::hardsigmoid(input, loc); }
Tensor MishImpl::forward(const Tensor& input, SourceLoc loc) { return functional::mish(input, loc); }
Tensor SiLUImpl::forward(const Tensor& input, SourceLoc loc) { return functional::silu(input, loc); }

PReLUImpl::PReLUImpl(const PReLUOptions& o) : options(o) {
  weight = register_parameter("weight", loom::full({o.num_parameters()}, o.init()));
}
Tensor PReLUImpl::forward(const Tensor& input, SourceLoc loc) { return functional::prelu(input, weight, loc); }
void PReLUImpl::pretty_print(std::ostream& os) const { os << "PReLU(num_parameters=" << options.num_parameters() << ")"; }

Tensor SoftmaxImpl::forward(const Tensor& input, SourceLoc loc) { return functional::softmax(input, options.dim(), loc); }
Tensor LogSoftmaxImpl::forward(const Tensor& input, SourceLoc loc) {
  return functional::log_softmax(input, options.dim(), loc);
}

}  // namespace loom::nn
