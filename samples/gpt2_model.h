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
    return with_attention(x, [](const loom::Tensor& q, const loom::Tensor& k, const loom::Tensor& v) {
      return loom::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
    });
  }
  // The same block over T new positions pos..pos+T-1 of a sequence whose
  // earlier keys and values are in `keys` and `values` ([B, H, capacity,
  // D], filled up to pos): the new ones are written there, and each new
  // query attends to every key at or before its position. `pos` is a
  // runtime scalar of the graph (a view's offset into the cache, a bound
  // of the mask), so every decoding step is the same graph.
  loom::Tensor forward(const loom::Tensor& x, loom::Tensor& keys, loom::Tensor& values, int64_t pos) {
    return with_attention(x, [&](const loom::Tensor& q, const loom::Tensor& k, const loom::Tensor& v) {
      const int64_t T = q.size(2), S = keys.size(2);
      keys.slice(2, pos, pos + T).copy_(k);
      values.slice(2, pos, pos + T).copy_(v);
      const loom::TensorOptions longs = loom::TensorOptions(loom::kLong).device(x.device());
      const loom::Tensor query_at = loom::arange(T, longs) + pos, key_at = loom::arange(S, longs);
      const loom::Tensor sees = key_at.unsqueeze(0).le(query_at.unsqueeze(1));  // [T, S]
      return loom::scaled_dot_product_attention(q, keys, values, sees);
    });
  }

 private:
  // The block around its attention, `attend(q, k, v)` on [B, H, T, D] heads.
  template <class Attend>
  loom::Tensor with_attention(const loom::Tensor& x, Attend&& attend) {
    namespace F = loom::nn::functional;
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    std::vector<loom::Tensor> qkv = attn_(ln1_(x)).split(C, 2);
    auto heads = [&](const loom::Tensor& t) { return t.view({B, T, heads_, C / heads_}).transpose(1, 2); };
    loom::Tensor y = attend(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]));
    loom::Tensor h = x + proj_(y.transpose(1, 2).contiguous().view({B, T, C}));
    return h + fc2_(F::gelu(fc_(ln2_(h)), F::GELUFuncOptions().approximate("tanh")));
  }

  int64_t heads_;
  loom::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  loom::nn::Linear attn_{nullptr}, proj_{nullptr}, fc_{nullptr}, fc2_{nullptr};
};
LOOM_MODULE(Block);

struct KVCache;

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
  // idx [B, T] at positions pos..pos+T-1, the earlier ones' keys and values
  // in `cache` (see KVCache) -> logits of the last position [B, vocab].
  loom::Tensor forward(const loom::Tensor& idx, KVCache& cache, int64_t pos);
  Config config;

 private:
  loom::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  std::vector<Block> blocks_;
  loom::nn::LayerNorm lnf_{nullptr};
};
LOOM_MODULE(GPT);

// The keys and values of every layer for a sequence of up to `capacity`
// positions, [B, H, capacity, D] each, so a decoding step writes one
// position and reads the filled ones: the tensors keep their shape, and
// every step is the same graph (one executable), its position a runtime
// scalar.
struct KVCache {
  KVCache(const Config& c, int64_t batch, int64_t capacity, loom::Device device) {
    const loom::TensorOptions o = loom::TensorOptions(loom::kFloat).device(device);
    for (int64_t l = 0; l < c.layers; ++l) {
      keys.push_back(loom::zeros({batch, c.heads, capacity, c.embd / c.heads}, o));
      values.push_back(loom::zeros({batch, c.heads, capacity, c.embd / c.heads}, o));
    }
  }
  std::vector<loom::Tensor> keys, values;
};

inline loom::Tensor GPTImpl::forward(const loom::Tensor& idx, KVCache& cache, int64_t pos) {
  const int64_t T = idx.size(1);
  loom::Tensor x = wte_(idx) + wpe_(loom::arange(T, loom::TensorOptions(loom::kLong).device(idx.device())) + pos);
  for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->forward(x, cache.keys[i], cache.values[i], pos);
  return loom::nn::functional::linear(lnf_(x.select(1, T - 1)), wte_->weight);
}

// Greedy decoding: the prompt in one call, then one token a call, each the
// argmax of the last position's logits; `prompt` [1, P]. Returns the new
// tokens. Every decoding step after the first is a replay.
inline std::vector<int64_t> generate(GPT& model, const loom::Tensor& prompt, int64_t n, int64_t capacity) {
  loom::NoGradGuard no_grad;
  model->eval();
  KVCache cache(model->config, 1, capacity, prompt.device());
  std::vector<int64_t> out;
  loom::Tensor next = model->forward(prompt, cache, 0).argmax(-1, true);  // [1, 1]
  for (int64_t pos = prompt.size(1); static_cast<int64_t>(out.size()) < n && pos < capacity; ++pos) {
    out.push_back(next.item<int64_t>());
    next = model->forward(next, cache, pos).argmax(-1, true);
  }
  return out;
}

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
