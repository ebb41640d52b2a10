// Activation functions and modules, as torch::nn's: LeakyReLU, ELU, SELU,
// CELU, Softplus, Hardswish, Hardsigmoid, Mish, SiLU, PReLU, Softmax,
// LogSoftmax, with their options (ReLU, Tanh, Sigmoid, GELU are in
// layers.h). Each is built from differentiable loom ops; `inplace` writes
// the result into the input, as libtorch's.
#pragma once
#include <loom/arg.h>
#include <loom/nn/module.h>

#pragma GCC visibility push(default)
namespace loom::nn {

struct LeakyReLUOptions {
  LOOM_ARG(LeakyReLUOptions, double, negative_slope, 1e-2)
  LOOM_ARG(LeakyReLUOptions, bool, inplace, false)
};
struct ELUOptions {
  LOOM_ARG(ELUOptions, double, alpha, 1.0)
  LOOM_ARG(ELUOptions, bool, inplace, false)
};
struct SELUOptions {
  SELUOptions(bool inplace = false) : inplace_(inplace) {}  // NOLINT
  LOOM_ARG(SELUOptions, bool, inplace, false)
};
struct CELUOptions {
  LOOM_ARG(CELUOptions, double, alpha, 1.0)
  LOOM_ARG(CELUOptions, bool, inplace, false)
};
struct SoftplusOptions {
  LOOM_ARG(SoftplusOptions, double, beta, 1.0)
  LOOM_ARG(SoftplusOptions, double, threshold, 20.0)
};
struct PReLUOptions {
  LOOM_ARG(PReLUOptions, int64_t, num_parameters, 1)
  LOOM_ARG(PReLUOptions, double, init, 0.25)
};
struct SoftmaxOptions {
  SoftmaxOptions(int64_t dim) : dim_(dim) {}  // NOLINT
  LOOM_ARG(SoftmaxOptions, int64_t, dim, -1)
};
using LogSoftmaxOptions = SoftmaxOptions;

namespace functional {
using LeakyReLUFuncOptions = LeakyReLUOptions;
using ELUFuncOptions = ELUOptions;
using SELUFuncOptions = SELUOptions;
using CELUFuncOptions = CELUOptions;
using SoftplusFuncOptions = SoftplusOptions;
// As libtorch's (F::softmax(x, F::SoftmaxFuncOptions(1))).
using SoftmaxFuncOptions = SoftmaxOptions;
using LogSoftmaxFuncOptions = SoftmaxOptions;

// x if x > 0, else negative_slope * x.
Tensor leaky_relu(const Tensor& x, const LeakyReLUFuncOptions& options = {}, LOOM_LOC);
// x if x > 0, else alpha * (exp(x) - 1).
Tensor elu(const Tensor& x, const ELUFuncOptions& options = {}, LOOM_LOC);
// scale * elu(x, alpha) with PyTorch's alpha 1.6732632423543772 and scale 1.0507009873554805.
Tensor selu(const Tensor& x, const SELUFuncOptions& options = {}, LOOM_LOC);
// max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).
Tensor celu(const Tensor& x, const CELUFuncOptions& options = {}, LOOM_LOC);
// log(1 + exp(beta x)) / beta; x where beta x > threshold.
Tensor softplus(const Tensor& x, const SoftplusFuncOptions& options = {}, LOOM_LOC);
// x * relu6(x + 3) / 6.
Tensor hardswish(const Tensor& x, LOOM_LOC);
// relu6(x + 3) / 6.
Tensor hardsigmoid(const Tensor& x, LOOM_LOC);
// x * tanh(softplus(x)).
Tensor mish(const Tensor& x, LOOM_LOC);
// max(0, x) + weight * min(0, x); weight has one value or one per channel (dim 1).
Tensor prelu(const Tensor& x, const Tensor& weight, LOOM_LOC);
Tensor softmax(const Tensor& x, const SoftmaxFuncOptions& options, LOOM_LOC);
Tensor log_softmax(const Tensor& x, const LogSoftmaxFuncOptions& options, LOOM_LOC);
}  // namespace functional

#define LOOM_ACTIVATION_MODULE(Name, Options)                                  \
  class Name##Impl : public Module {                                           \
   public:                                                                     \
    explicit Name##Impl(const Options& options = {}) : options(options) {}     \
    Tensor forward(const Tensor& input, LOOM_LOC);                             \
    void pretty_print(std::ostream& os) const override;                        \
    Options options;                                                           \
  };                                                                           \
  LOOM_MODULE(Name)

LOOM_ACTIVATION_MODULE(LeakyReLU, LeakyReLUOptions);
LOOM_ACTIVATION_MODULE(ELU, ELUOptions);
LOOM_ACTIVATION_MODULE(SELU, SELUOptions);
LOOM_ACTIVATION_MODULE(CELU, CELUOptions);
LOOM_ACTIVATION_MODULE(Softplus, SoftplusOptions);
#undef LOOM_ACTIVATION_MODULE

#define LOOM_PLAIN_ACTIVATION_MODULE(Name)                           \
  class Name##Impl : public Module {                                 \
   public:                                                           \
    Tensor forward(const Tensor& input, LOOM_LOC);                   \
    void pretty_print(std::ostream& os) const override { os << #Name "()"; } \
  };                                                                 \
  LOOM_MODULE(Name)

LOOM_PLAIN_ACTIVATION_MODULE(Hardswish);
LOOM_PLAIN_ACTIVATION_MODULE(Hardsigmoid);
LOOM_PLAIN_ACTIVATION_MODULE(Mish);
LOOM_PLAIN_ACTIVATION_MODULE(SiLU);
#undef LOOM_PLAIN_ACTIVATION_MODULE

// A learned slope per channel (or one for all): weight [num_parameters] = init.
class PReLUImpl : public Module {
 public:
  explicit PReLUImpl(const PReLUOptions& options = {});
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  PReLUOptions options;
  Tensor weight;
};
LOOM_MODULE(PReLU);

class SoftmaxImpl : public Module {
 public:
  explicit SoftmaxImpl(const SoftmaxOptions& options) : options(options) {}
  explicit SoftmaxImpl(int64_t dim) : options(dim) {}
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override { os << "Softmax(dim=" << options.dim() << ")"; }
  SoftmaxOptions options;
};
LOOM_MODULE(Softmax);

class LogSoftmaxImpl : public Module {
 public:
  explicit LogSoftmaxImpl(const LogSoftmaxOptions& options) : options(options) {}
  explicit LogSoftmaxImpl(int64_t dim) : options(dim) {}
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override { os << "LogSoftmax(dim=" << options.dim() << ")"; }
  LogSoftmaxOptions options;
};
LOOM_MODULE(LogSoftmax);

}  // namespace loom::nn
#pragma GCC visibility pop
