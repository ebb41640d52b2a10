// loom/nn/top_level.h: ATen's positional signatures over nn::functional.
#include <loom/nn/top_level.h>

namespace loom {

namespace F = nn::functional;

namespace {
nn::Pair pair_of(IntArrayRef v, const char* what, const SourceLoc& loc) {
  LOOM_CHECK(v.size() == 1 || v.size() == 2, "max_pool2d", loc, what, " must be one int or two, got ", v.size());
  return v.size() == 1 ? nn::Pair(v[0]) : nn::Pair({v[0], v[1]});
}
}  // namespace

Tensor nll_loss(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight, Reduction reduction,
                int64_t ignore_index, SourceLoc loc) {
  return F::nll_loss(self, target,
                     F::NLLLossFuncOptions(reduction).weight(weight.value_or(Tensor())).ignore_index(ignore_index), loc);
}

Tensor cross_entropy_loss(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight,
                          Reduction reduction, int64_t ignore_index, double label_smoothing, SourceLoc loc) {
  return F::cross_entropy(self, target,
                          F::CrossEntropyFuncOptions()
                              .reduction(reduction)
                              .weight(weight.value_or(Tensor()))
                              .ignore_index(ignore_index)
                              .label_smoothing(label_smoothing),
                          loc);
}

Tensor binary_cross_entropy(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight,
                            Reduction reduction, SourceLoc loc) {
  return F::binary_cross_entropy(self, target,
                                 F::BinaryCrossEntropyFuncOptions(reduction).weight(weight.value_or(Tensor())), loc);
}

Tensor mse_loss(const Tensor& self, const Tensor& target, Reduction reduction, SourceLoc loc) {
  return F::mse_loss(self, target, F::MSELossFuncOptions(reduction), loc);
}

Tensor l1_loss(const Tensor& self, const Tensor& target, Reduction reduction, SourceLoc loc) {
  return F::l1_loss(self, target, F::L1LossFuncOptions(reduction), loc);
}

Tensor smooth_l1_loss(const Tensor& self, const Tensor& target, Reduction reduction, double beta, SourceLoc loc) {
  return F::smooth_l1_loss(self, target, F::SmoothL1LossFuncOptions(reduction).beta(beta), loc);
}

Tensor max_pool2d(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                  IntArrayRef dilation, bool ceil_mode, SourceLoc loc) {
  F::MaxPool2dFuncOptions o(pair_of(kernel_size, "kernel_size", loc));
  if (!stride.empty()) o.stride(pair_of(stride, "stride", loc));
  return F::max_pool2d(
      self, o.padding(pair_of(padding, "padding", loc)).dilation(pair_of(dilation, "dilation", loc)).ceil_mode(ceil_mode),
      loc);
}

Tensor dropout(const Tensor& input, double p, bool train, SourceLoc loc) {
  return F::dropout(input, F::DropoutFuncOptions().p(p).training(train), loc);
}

Tensor flatten(const Tensor& self, int64_t start_dim, int64_t end_dim, SourceLoc loc) {
  return self.flatten(start_dim, end_dim, loc);
}

Tensor reshape(const Tensor& self, IntArrayRef shape, SourceLoc loc) { return self.reshape(shape, loc); }

}  // namespace loom
