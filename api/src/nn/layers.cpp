// The layers (loom/nn/layers.h): parameters, PyTorch's initialization, and
// forward as the functional form.
#include <loom/autograd.h>
#include <loom/nn/init.h>
#include <loom/nn/layers.h>

#include <cmath>

#include "api/src/nn/shared.h"
#include "api/src/record.h"

namespace loom::nn {

namespace {
using shared::yes;
std::ostream& operator<<(std::ostream& os, const Pair& p) { return os << "[" << p.h << ", " << p.w << "]"; }
}  // namespace

// ---------------------------------------------------------------- Linear
LinearImpl::LinearImpl(const LinearOptions& o) : options(o) {
  const SourceLoc loc = SourceLoc::current();
  LOOM_CHECK(o.in_features() >= 0 && o.out_features() >= 0, "Linear", loc, "in_features and out_features must be "
             "non-negative, got ", o.in_features(), " and ", o.out_features());
  weight = register_parameter("weight", loom::empty({o.out_features(), o.in_features()}));
  if (o.bias()) bias = register_parameter("bias", loom::empty({o.out_features()}));
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double in = static_cast<double>(options.in_features());
    const double bound = in > 0 ? 1 / std::sqrt(in) : 0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LinearImpl::forward(const Tensor& input, SourceLoc loc) { return functional::linear(input, weight, bias, loc); }

void LinearImpl::pretty_print(std::ostream& os) const {
  os << "Linear(in_features=" << options.in_features() << ", out_features=" << options.out_features()
     << ", bias=" << yes(options.bias()) << ")";
}

// ---------------------------------------------------------------- activations, dropout
Tensor GELUImpl::forward(const Tensor& input, SourceLoc loc) {
  return functional::gelu(input, functional::GELUFuncOptions().approximate(options.approximate()), loc);
}
void GELUImpl::pretty_print(std::ostream& os) const { os << "GELU(approximate=" << options.approximate() << ")"; }

DropoutImpl::DropoutImpl(const DropoutOptions& o) : options(o) {
  LOOM_CHECK(o.p() >= 0 && o.p() <= 1, "Dropout", SourceLoc::current(),
             "dropout probability has to be between 0 and 1, but got ", o.p());
}
Tensor DropoutImpl::forward(const Tensor& input, SourceLoc loc) {
  return functional::dropout(input, functional::DropoutFuncOptions().p(options.p()).training(is_training()), loc);
}
void DropoutImpl::pretty_print(std::ostream& os) const { os << "Dropout(p=" << options.p() << ")"; }

// ---------------------------------------------------------------- LayerNorm
LayerNormImpl::LayerNormImpl(const LayerNormOptions& o) : options(o) {
  if (o.elementwise_affine()) {
    weight = register_parameter("weight", loom::empty(o.normalized_shape()));
    bias = register_parameter("bias", loom::empty(o.normalized_shape()));
  }
  reset_parameters();
}
void LayerNormImpl::reset_parameters() {
  if (!options.elementwise_affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}
Tensor LayerNormImpl::forward(const Tensor& input, SourceLoc loc) {
  return functional::layer_norm(
      input, functional::LayerNormFuncOptions(options.normalized_shape()).weight(weight).bias(bias).eps(options.eps()),
      loc);
}
void LayerNormImpl::pretty_print(std::ostream& os) const {
  os << "LayerNorm(" << IntArrayRef(options.normalized_shape()) << ", eps=" << options.eps()
     << ", elementwise_affine=" << yes(options.elementwise_affine()) << ")";
}

// ---------------------------------------------------------------- Embedding
EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& o) : options(o) {
  if (o.padding_idx()) {
    const int64_t pad = *o.padding_idx();
    LOOM_CHECK(pad < o.num_embeddings() && pad >= -o.num_embeddings(), "Embedding", SourceLoc::current(),
               "padding_idx must be within num_embeddings (", o.num_embeddings(), "), got ", pad);
    options.padding_idx(pad < 0 ? pad + o.num_embeddings() : pad);
  }
  weight = register_parameter("weight", loom::empty({o.num_embeddings(), o.embedding_dim()}));
  reset_parameters();
}
void EmbeddingImpl::reset_parameters() {
  init::normal_(weight);
  if (options.padding_idx()) {
    NoGradGuard no_grad;
    weight.select(0, *options.padding_idx()).zero_();
  }
}
Tensor EmbeddingImpl::forward(const Tensor& indices, SourceLoc loc) {
  Tensor out = functional::embedding(indices, weight, loc);
  if (!options.padding_idx()) return out;
  // The padding row is zero already; the mask keeps its gradient zero too.
  Tensor keep = indices.ne(*options.padding_idx(), loc).unsqueeze(-1, loc).to(weight.dtype(), loc);
  return out.mul(keep, loc);
}
void EmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "Embedding(num_embeddings=" << options.num_embeddings() << ", embedding_dim=" << options.embedding_dim();
  if (options.padding_idx()) os << ", padding_idx=" << *options.padding_idx();
  os << ")";
}

// ---------------------------------------------------------------- Conv2d, pooling, flatten
Conv2dImpl::Conv2dImpl(const Conv2dOptions& o) : options(o) {
  LOOM_CHECK(o.groups() > 0 && o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0, "Conv2d",
             SourceLoc::current(), "in_channels (", o.in_channels(), ") and out_channels (", o.out_channels(),
             ") must be divisible by groups (", o.groups(), ")");
  weight = register_parameter(
      "weight", loom::empty({o.out_channels(), o.in_channels() / o.groups(), o.kernel_size().h, o.kernel_size().w}));
  if (o.bias()) bias = register_parameter("bias", loom::empty({o.out_channels()}));
  reset_parameters();
}
void Conv2dImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double fan_in =
        static_cast<double>(options.in_channels() / options.groups() * options.kernel_size().h * options.kernel_size().w);
    const double bound = fan_in > 0 ? 1 / std::sqrt(fan_in) : 0;
    init::uniform_(bias, -bound, bound);
  }
}
Tensor Conv2dImpl::forward(const Tensor& input, SourceLoc loc) {
  return functional::conv2d(input, weight,
                            functional::Conv2dFuncOptions()
                                .bias(bias)
                                .stride(options.stride())
                                .padding(options.padding())
                                .dilation(options.dilation())
                                .groups(options.groups()),
                            loc);
}
void Conv2dImpl::pretty_print(std::ostream& os) const {
  os << "Conv2d(" << options.in_channels() << ", " << options.out_channels() << ", kernel_size=" << options.kernel_size()
     << ", stride=" << options.stride() << ", padding=" << options.padding();
  if (options.groups() != 1) os << ", groups=" << options.groups();
  os << ")";
}

void MaxPool2dImpl::pretty_print(std::ostream& os) const {
  os << "MaxPool2d(kernel_size=" << options.kernel_size() << ", stride=" << options.stride().value_or(options.kernel_size())
     << ", padding=" << options.padding() << ", dilation=" << options.dilation()
     << ", ceil_mode=" << (options.ceil_mode() ? "true" : "false") << ")";
}
void AvgPool2dImpl::pretty_print(std::ostream& os) const {
  os << "AvgPool2d(kernel_size=" << options.kernel_size() << ", stride=" << options.stride().value_or(options.kernel_size())
     << ", padding=" << options.padding() << ")";
}
void AdaptiveAvgPool2dImpl::pretty_print(std::ostream& os) const {
  os << "AdaptiveAvgPool2d(output_size=" << options.output_size() << ")";
}
void AdaptiveMaxPool2dImpl::pretty_print(std::ostream& os) const {
  os << "AdaptiveMaxPool2d(output_size=" << options.output_size() << ")";
}
Tensor ReLUImpl::forward(const Tensor& input, SourceLoc loc) {
  if (!options.inplace()) return functional::relu(input, loc);
  Tensor x = input;
  x.relu_(loc);
  return x;
}
void FlattenImpl::pretty_print(std::ostream& os) const {
  os << "Flatten(start_dim=" << options.start_dim() << ", end_dim=" << options.end_dim() << ")";
}

}  // namespace loom::nn
