// GPT-2 as WORKLOADS.md's W7 defines it, written against libtorch's C++
// frontend: token and position embeddings, pre-norm blocks (LayerNorm,
// causal self-attention through scaled_dot_product_attention, residual,
// LayerNorm, MLP C -> 4C -> C with tanh-GELU, residual), a final LayerNorm
// and a head tied to the token embedding. Every layer keeps libtorch's
// default initialization (Linear: U(+-1/sqrt(in)), Embedding: N(0, 1)), as
// the PyTorch peer in shared/bench-peers/peers.py does. Shared by
// samples/train_gpt2.cpp and bench/loom_bench.cpp (W7, W8).
#pragma once
#include <loom/loom.h>

#include <string>
#include <vector>

namespace gpt2 {

struct Config {
  int64_t layers = 12, heads = 12, embd = 768, vocab = 50304, block = 1024;
  // WORKLOADS.md's two sizes: the GPU one (GPT-2 small) and the CPU one.
  static Config gpu() { return {}; }
  static Config cpu() { return {2, 4, 128, 4096, 128}; }
};

class BlockImpl : public loom::nn::Module {
 public:
  BlockImpl(const Config& c) : heads_(c.heads) {
    namespace nn = loom::nn;
    ln1_ = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({c.embd})));
    attn_ = register_module("attn", nn::Linear(c.embd, 3 * c.embd));
    proj_ = register_module("proj", nn::Linear(c.embd, c.embd));
    ln2_ = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({c.embd})));
    fc_ = register_module("fc", nn::Linear(c.embd, 4 * c.embd));
    fc2_ = register_module("fc2", nn::Linear(4 * c.embd, c.embd));
  }
  loom::Tensor forward(const loom::Tensor& x) {
    namespace F = loom::nn::functional;
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    std::vector<loom::Tensor> qkv = attn_(ln1_(x)).split(C, 2);
    auto heads = [&](const loom::Tensor& t) { return t.view({B, T, heads_, C / heads_}).transpose(1, 2); };
    loom::Tensor y = loom::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {}, 0.0,
                                                        /*is_causal=*/true);
    loom::Tensor h = x + proj_(y.transpose(1, 2).contiguous().view({B, T, C}));
    return h + fc2_(F::gelu(fc_(ln2_(h)), F::GELUFuncOptions().approximate("tanh")));
  }

 private:
  int64_t heads_;
  loom::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  loom::nn::Linear attn_{nullptr}, proj_{nullptr}, fc_{nullptr}, fc2_{nullptr};
};
LOOM_MODULE(Block);

class GPTImpl : public loom::nn::Module {
 public:
  explicit GPTImpl(const Config& c) : config(c) {
    namespace nn = loom::nn;
    wte_ = register_module("wte", nn::Embedding(c.vocab, c.embd));
    wpe_ = register_module("wpe", nn::Embedding(c.block, c.embd));
    for (int64_t i = 0; i < c.layers; ++i) blocks_.push_back(register_module("h" + std::to_string(i), Block(c)));
    lnf_ = register_module("lnf", nn::LayerNorm(nn::LayerNormOptions({c.embd})));
  }
  // idx [B, T] int64 -> logits [B, T, vocab] (the head is wte's weight).
  loom::Tensor forward(const loom::Tensor& idx) {
    const int64_t T = idx.size(1);
    loom::Tensor pos = loom::arange(T, loom::TensorOptions(loom::kLong).device(idx.device()));
    loom::Tensor x = wte_(idx) + wpe_(pos);
    for (Block& b : blocks_) x = b(x);
    return loom::nn::functional::linear(lnf_(x), wte_->weight);
  }
  Config config;

 private:
  loom::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  std::vector<Block> blocks_;
  loom::nn::LayerNorm lnf_{nullptr};
};
LOOM_MODULE(GPT);

// One W7 training step: logits in float32 (under autocast the products run
// in bfloat16), cross-entropy over every position, backward, the gradients'
// joint norm clipped to 1.0 without reading it on the host, AdamW.
inline loom::Tensor train_step(GPT& model, loom::optim::Optimizer& opt, const loom::Tensor& idx, bool amp) {
  const int64_t T = idx.size(1) - 1, V = model->config.vocab;
  opt.zero_grad(true);
  loom::Tensor loss;
  {
    loom::autocast::AutocastMode guard(idx.device().type(), loom::kBFloat16, amp);
    loom::Tensor logits = model->forward(idx.slice(1, 0, T));
    loss = loom::nn::functional::cross_entropy(logits.to(loom::kFloat).view({-1, V}), idx.slice(1, 1, T + 1).reshape({-1}));
  }
  loss.backward();
  const std::vector<loom::Tensor> params = model->parameters();
  std::vector<loom::Tensor> grads;
  for (const loom::Tensor& p : params) grads.push_back(p.grad());
  loom::nn::utils::clip_grads_with_norm_(params, 1.0, loom::nn::utils::get_total_norm(grads));
  opt.step();
  return loss;
}

inline loom::optim::AdamW make_optimizer(GPT& model) {
  return loom::optim::AdamW(model->parameters(),
                            loom::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).weight_decay(0.1));
}

}  // namespace gpt2
