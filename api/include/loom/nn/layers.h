// The layers, as torch::nn: Linear, ReLU, GELU, Tanh, Sigmoid, Dropout,
// LayerNorm, Embedding, Conv2d, MaxPool2d, Flatten. Each `XImpl` is a
// Module; `X` (LOOM_MODULE) is the shared handle users hold.
// Parameters are initialized as PyTorch initializes them, from loom's
// generator (loom::manual_seed makes them reproducible).
#pragma once
#include <functional>
#include <type_traits>

#include <loom/nn/functional.h>
#include <loom/nn/module.h>
#include <loom/nn/options.h>

#pragma GCC visibility push(default)
namespace loom::nn {

class LinearImpl : public Module {
 public:
  explicit LinearImpl(const LinearOptions& options);
  LinearImpl(int64_t in_features, int64_t out_features) : LinearImpl(LinearOptions(in_features, out_features)) {}
  // weight, bias ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_ with a = sqrt(5)).
  void reset_parameters();
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  LinearOptions options;
  Tensor weight, bias;  // [out, in], [out] (undefined without bias)
};
LOOM_MODULE(Linear);

// ReLUOptions().inplace(true) writes the result into the input, as libtorch's.
class ReLUImpl : public Module {
 public:
  explicit ReLUImpl(const ReLUOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override { os << (options.inplace() ? "ReLU(inplace=true)" : "ReLU()"); }
  ReLUOptions options;
};
LOOM_MODULE(ReLU);

// A free function as a module (Sequential(Linear(4, 4), Functional(torch::relu))):
// any callable of one tensor, or of a tensor and the caller's location.
class FunctionalImpl : public Module {
 public:
  template <class F>
  explicit FunctionalImpl(F f) {
    if constexpr (std::is_invocable_v<F, const Tensor&, SourceLoc>)
      f_ = [f](const Tensor& x, SourceLoc loc) { return f(x, loc); };
    else
      f_ = [f](const Tensor& x, SourceLoc) { return f(x); };
  }
  Tensor forward(const Tensor& input, LOOM_LOC) { return f_(input, loc); }
  void pretty_print(std::ostream& os) const override { os << "Functional()"; }

 private:
  std::function<Tensor(const Tensor&, SourceLoc)> f_;
};
LOOM_MODULE(Functional);

class GELUImpl : public Module {
 public:
  explicit GELUImpl(const GELUOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  GELUOptions options;
};
LOOM_MODULE(GELU);

class TanhImpl : public Module {
 public:
  Tensor forward(const Tensor& input, LOOM_LOC) { return functional::tanh(input, loc); }
  void pretty_print(std::ostream& os) const override { os << "Tanh()"; }
};
LOOM_MODULE(Tanh);

class SigmoidImpl : public Module {
 public:
  Tensor forward(const Tensor& input, LOOM_LOC) { return functional::sigmoid(input, loc); }
  void pretty_print(std::ostream& os) const override { os << "Sigmoid()"; }
};
LOOM_MODULE(Sigmoid);

// Active in training mode only (Module::train / eval).
class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(const DropoutOptions& options = {});
  explicit DropoutImpl(double p) : DropoutImpl(DropoutOptions(p)) {}
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  DropoutOptions options;
};
LOOM_MODULE(Dropout);

class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(const LayerNormOptions& options);
  void reset_parameters();  // weight = 1, bias = 0
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  LayerNormOptions options;
  Tensor weight, bias;
};
LOOM_MODULE(LayerNorm);

class EmbeddingImpl : public Module {
 public:
  explicit EmbeddingImpl(const EmbeddingOptions& options);
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingImpl(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  void reset_parameters();  // N(0, 1); the padding row zero
  Tensor forward(const Tensor& indices, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  EmbeddingOptions options;
  Tensor weight;  // [num_embeddings, embedding_dim]
};
LOOM_MODULE(Embedding);

class Conv2dImpl : public Module {
 public:
  explicit Conv2dImpl(const Conv2dOptions& options);
  Conv2dImpl(int64_t in_channels, int64_t out_channels, Pair kernel_size)
      : Conv2dImpl(Conv2dOptions(in_channels, out_channels, kernel_size)) {}
  void reset_parameters();  // as Linear, with fan_in = in_channels * kH * kW
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  Conv2dOptions options;
  Tensor weight, bias;  // [out, in, kH, kW], [out]
};
LOOM_MODULE(Conv2d);

class MaxPool2dImpl : public Module {
 public:
  explicit MaxPool2dImpl(const MaxPool2dOptions& options) : options(options) {}
  explicit MaxPool2dImpl(Pair size) : options(size) {}
  Tensor forward(const Tensor& input, LOOM_LOC) { return functional::max_pool2d(input, options, loc); }
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& input, LOOM_LOC) {
    return functional::max_pool2d_with_indices(input, options, loc);
  }
  void pretty_print(std::ostream& os) const override;
  MaxPool2dOptions options;
};
LOOM_MODULE(MaxPool2d);

class AvgPool2dImpl : public Module {
 public:
  explicit AvgPool2dImpl(const AvgPool2dOptions& options) : options(options) {}
  explicit AvgPool2dImpl(Pair size) : options(size) {}
  Tensor forward(const Tensor& input, LOOM_LOC) { return functional::avg_pool2d(input, options, loc); }
  void pretty_print(std::ostream& os) const override;
  AvgPool2dOptions options;
};
LOOM_MODULE(AvgPool2d);

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options) : options(options) {}
  explicit AdaptiveAvgPool2dImpl(Pair size) : options(size) {}
  Tensor forward(const Tensor& input, LOOM_LOC) { return functional::adaptive_avg_pool2d(input, options, loc); }
  void pretty_print(std::ostream& os) const override;
  AdaptiveAvgPool2dOptions options;
};
LOOM_MODULE(AdaptiveAvgPool2d);

class AdaptiveMaxPool2dImpl : public Module {
 public:
  explicit AdaptiveMaxPool2dImpl(const AdaptiveMaxPool2dOptions& options) : options(options) {}
  explicit AdaptiveMaxPool2dImpl(Pair size) : options(size) {}
  Tensor forward(const Tensor& input, LOOM_LOC) { return functional::adaptive_max_pool2d(input, options, loc); }
  void pretty_print(std::ostream& os) const override;
  AdaptiveMaxPool2dOptions options;
};
LOOM_MODULE(AdaptiveMaxPool2d);

class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(const FlattenOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input, LOOM_LOC) { return input.flatten(options.start_dim(), options.end_dim(), loc); }
  void pretty_print(std::ostream& os) const override;
  FlattenOptions options;
};
LOOM_MODULE(Flatten);

}  // namespace loom::nn
#pragma GCC visibility pop
