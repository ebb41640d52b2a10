// nn::init: in-place initializers (PyTorch's formulas), drawing from loom's
// generator, so loom::manual_seed makes a model's initial values reproducible.
#include <loom/autograd.h>
#include <loom/functions.h>
#include <loom/nn/init.h>

#include <cmath>

#include "api/src/record.h"

namespace loom::nn::init {

namespace {

std::pair<double, double> fans(const Tensor& t) {
  LOOM_CHECK(t.dim() >= 2, "init", SourceLoc::current(),
             "fan in and fan out can not be computed for a tensor with fewer than 2 dimensions (",
             detail::describe(t), ")");
  double receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= static_cast<double>(t.size(d));
  return {static_cast<double>(t.size(1)) * receptive, static_cast<double>(t.size(0)) * receptive};
}

Tensor fill_with(Tensor t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
  return t;
}

TensorOptions like(const Tensor& t) { return TensorOptions(t.dtype()).device(t.device()); }

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case kTanh: return 5.0 / 3;
    case kReLU: return std::sqrt(2.0);
    case kLeakyReLU: return std::sqrt(2.0 / (1 + param * param));
    case kLinear:
    case kSigmoid: return 1;
    case kGELU: break;
  }
  throw Error("calculate_gain: unsupported nonlinearity (PyTorch defines none for GELU)");
}

Tensor uniform_(Tensor tensor, double low, double high) {
  return fill_with(tensor, rand(tensor.sizes(), like(tensor)) * (high - low) + low);
}
Tensor normal_(Tensor tensor, double mean, double std) {
  return fill_with(tensor, randn(tensor.sizes(), like(tensor)) * std + mean);
}
Tensor constant_(Tensor tensor, const Scalar& value) {
  NoGradGuard no_grad;
  tensor.fill_(value);
  return tensor;
}
Tensor zeros_(Tensor tensor) { return constant_(tensor, 0); }
Tensor ones_(Tensor tensor) { return constant_(tensor, 1); }

Tensor kaiming_uniform_(Tensor tensor, double a, FanMode mode, Nonlinearity nonlinearity) {
  auto [in, out] = fans(tensor);
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(mode == kFanIn ? in : out);
  const double bound = std::sqrt(3.0) * std;
  return uniform_(tensor, -bound, bound);
}
Tensor kaiming_normal_(Tensor tensor, double a, FanMode mode, Nonlinearity nonlinearity) {
  auto [in, out] = fans(tensor);
  return normal_(tensor, 0, calculate_gain(nonlinearity, a) / std::sqrt(mode == kFanIn ? in : out));
}
Tensor xavier_uniform_(Tensor tensor, double gain) {
  auto [in, out] = fans(tensor);
  const double bound = std::sqrt(3.0) * gain * std::sqrt(2.0 / (in + out));
  return uniform_(tensor, -bound, bound);
}
Tensor xavier_normal_(Tensor tensor, double gain) {
  auto [in, out] = fans(tensor);
  return normal_(tensor, 0, gain * std::sqrt(2.0 / (in + out)));
}

}  // namespace loom::nn::init
