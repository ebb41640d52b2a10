// ResNet-18 in its CIFAR form, as WORKLOADS.md's W10 defines it: a 3x3 stem
// of `width` channels, no max pool, BasicBlocks of widths w, w, 2w, 2w, 4w,
// 4w, 8w, 8w with stride 2 at each new width and a 1x1 convolution +
// BatchNorm shortcut there, global average pooling, Linear 8w -> 10.
// libtorch's default initialization throughout, as the PyTorch peer.
// Shared by samples/resnet.cpp and bench/loom_bench.cpp (W10).
#pragma once
#include <loom/loom.h>

namespace resnet18 {

inline loom::nn::Conv2dOptions conv3x3(int64_t in, int64_t out, int64_t stride) {
  return loom::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false);
}

struct BasicBlockImpl : loom::nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
    namespace nn = loom::nn;
    conv1 = register_module("conv1", nn::Conv2d(conv3x3(in, out, stride)));
    bn1 = register_module("bn1", nn::BatchNorm2d(out));
    conv2 = register_module("conv2", nn::Conv2d(conv3x3(out, out, 1)));
    bn2 = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out)
      shortcut = register_module(
          "shortcut",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)), nn::BatchNorm2d(out)));
  }
  loom::Tensor forward(loom::Tensor x) {
    loom::Tensor y = loom::relu(bn1->forward(conv1->forward(x)));
    y = bn2->forward(conv2->forward(y));
    return loom::relu(y + (shortcut ? shortcut->forward(x) : x));
  }
  loom::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  loom::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  loom::nn::Sequential shortcut{nullptr};
};
LOOM_MODULE(BasicBlock);

struct ResNet18Impl : loom::nn::Module {
  explicit ResNet18Impl(int64_t w = 64) {
    namespace nn = loom::nn;
    stem = register_module("stem", nn::Conv2d(conv3x3(3, w, 1)));
    bn = register_module("bn", nn::BatchNorm2d(w));
    blocks = register_module("blocks", nn::ModuleList());
    int64_t in = w;
    for (int64_t out : {w, w, 2 * w, 2 * w, 4 * w, 4 * w, 8 * w, 8 * w}) {
      blocks->push_back(BasicBlock(in, out, out == in ? 1 : 2));
      in = out;
    }
    pool = register_module("pool", nn::AdaptiveAvgPool2d(1));
    fc = register_module("fc", nn::Linear(8 * w, 10));
  }
  loom::Tensor forward(loom::Tensor x) {
    x = loom::relu(bn->forward(stem->forward(x)));
    for (const auto& block : *blocks) x = block->as<BasicBlock>()->forward(x);
    return fc->forward(loom::flatten(pool->forward(x), 1));
  }
  loom::nn::Conv2d stem{nullptr};
  loom::nn::BatchNorm2d bn{nullptr};
  loom::nn::ModuleList blocks{nullptr};
  loom::nn::AdaptiveAvgPool2d pool{nullptr};
  loom::nn::Linear fc{nullptr};
};
LOOM_MODULE(ResNet18);

// One W10 step: cross-entropy of the float32 logits (the convolutions in
// bfloat16 under autocast), backward, SGD.
inline loom::Tensor train_step(ResNet18& model, loom::optim::Optimizer& opt, const loom::Tensor& images,
                               const loom::Tensor& labels, bool amp) {
  opt.zero_grad(true);
  loom::Tensor loss;
  {
    loom::autocast::AutocastMode guard(images.device().type(), loom::kBFloat16, amp);
    loss = loom::nn::functional::cross_entropy(model->forward(images).to(loom::kFloat), labels);
  }
  loss.backward();
  opt.step();
  return loss;
}

}  // namespace resnet18
