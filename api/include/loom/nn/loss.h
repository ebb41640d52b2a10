// The losses as modules (torch::nn::MSELoss, CrossEntropyLoss, ...): each
// holds its options and calls its nn::functional form.
#pragma once
#include <loom/nn/functional.h>
#include <loom/nn/module.h>

#pragma GCC visibility push(default)
namespace loom::nn {

#define LOOM_LOSS_MODULE(Name, Options, fn)                                                  \
  class Name##Impl : public Module {                                                          \
   public:                                                                                    \
    explicit Name##Impl(const Options& options = {}) : options(options) {}                    \
    Tensor forward(const Tensor& input, const Tensor& target, LOOM_LOC) {                    \
      return functional::fn(input, target, options, loc);                                     \
    }                                                                                         \
    void pretty_print(std::ostream& os) const override { os << #Name "()"; }                  \
    Options options;                                                                          \
  };                                                                                          \
  LOOM_MODULE(Name)

LOOM_LOSS_MODULE(MSELoss, MSELossOptions, mse_loss);
LOOM_LOSS_MODULE(L1Loss, L1LossOptions, l1_loss);
LOOM_LOSS_MODULE(SmoothL1Loss, SmoothL1LossOptions, smooth_l1_loss);
LOOM_LOSS_MODULE(HuberLoss, HuberLossOptions, huber_loss);
LOOM_LOSS_MODULE(CrossEntropyLoss, CrossEntropyLossOptions, cross_entropy);
LOOM_LOSS_MODULE(NLLLoss, NLLLossOptions, nll_loss);
LOOM_LOSS_MODULE(BCELoss, BCELossOptions, binary_cross_entropy);
LOOM_LOSS_MODULE(BCEWithLogitsLoss, BCEWithLogitsLossOptions, binary_cross_entropy_with_logits);
LOOM_LOSS_MODULE(KLDivLoss, KLDivLossOptions, kl_div);

#undef LOOM_LOSS_MODULE

}  // namespace loom::nn
#pragma GCC visibility pop
