// A small GPT (nanoGPT's model) written against loom's libtorch-style API,
// as a user porting a libtorch program writes it: token and position
// embeddings, pre-norm blocks of causal self-attention and a GELU MLP, a
// final layer norm and an untied head. Shared by samples/tiny_gpt.cpp,
// bench/loom_bench.cpp and the tests that train or generate with it.
#pragma once
#include <loom/loom.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace gpt {

namespace nn = loom::nn;
namespace F = loom::nn::functional;
using loom::Tensor;

struct Config {
  int64_t vocab = 32;   // tokens
  int64_t block = 64;   // longest context
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t embd = 64;
};

class CausalSelfAttentionImpl : public nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const Config& c) : heads_(c.heads), embd_(c.embd) {
    qkv_ = register_module("c_attn", nn::Linear(c.embd, 3 * c.embd));
    proj_ = register_module("c_proj", nn::Linear(c.embd, c.embd));
    // The causal mask as a buffer, as nanoGPT keeps it: row t sees 0..t.
    mask_ = register_buffer("bias", loom::ones({c.block, c.block}).tril().view({1, 1, c.block, c.block}));
  }
  Tensor forward(const Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / heads_;
    std::vector<Tensor> qkv = qkv_(x).split(embd_, 2);
    Tensor q = qkv[0].view({B, T, heads_, hs}).transpose(1, 2);  // [B, H, T, hs]
    Tensor k = qkv[1].view({B, T, heads_, hs}).transpose(1, 2);
    Tensor v = qkv[2].view({B, T, heads_, hs}).transpose(1, 2);
    Tensor att = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hs)));
    Tensor visible = mask_.slice(2, 0, T).slice(3, 0, T) != 0;
    att = loom::where(visible, att, -INFINITY).softmax(-1);
    Tensor y = att.matmul(v).transpose(1, 2).contiguous().view({B, T, C});
    return proj_(y);
  }

 private:
  int64_t heads_, embd_;
  nn::Linear qkv_{nullptr}, proj_{nullptr};
  Tensor mask_;
};
LOOM_MODULE(CausalSelfAttention);

class BlockImpl : public nn::Module {
 public:
  explicit BlockImpl(const Config& c) {
    ln1_ = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({c.embd})));
    attn_ = register_module("attn", CausalSelfAttention(c));
    ln2_ = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({c.embd})));
    fc_ = register_module("c_fc", nn::Linear(c.embd, 4 * c.embd));
    out_ = register_module("c_proj", nn::Linear(4 * c.embd, c.embd));
  }
  Tensor forward(Tensor x) {
    x = x + attn_(ln1_(x));
    return x + out_(F::gelu(fc_(ln2_(x))));
  }

 private:
  nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  CausalSelfAttention attn_{nullptr};
  nn::Linear fc_{nullptr}, out_{nullptr};
};
LOOM_MODULE(Block);

class GPTImpl : public nn::Module {
 public:
  explicit GPTImpl(const Config& c) : config(c) {
    wte_ = register_module("wte", nn::Embedding(c.vocab, c.embd));
    wpe_ = register_module("wpe", nn::Embedding(c.block, c.embd));
    for (int64_t i = 0; i < c.layers; ++i) blocks_.push_back(register_module("h" + std::to_string(i), Block(c)));
    ln_f_ = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({c.embd})));
    head_ = register_module("lm_head", nn::Linear(nn::LinearOptions(c.embd, c.vocab).bias(false)));
  }
  // idx: [B, T] token ids (int64), T <= block. Returns logits [B, T, vocab].
  Tensor forward(const Tensor& idx) {
    const int64_t T = idx.size(1);
    Tensor pos = loom::arange(T, loom::TensorOptions(loom::kLong).device(idx.device()));
    Tensor x = wte_(idx) + wpe_(pos);
    for (Block& b : blocks_) x = b(x);
    return head_(ln_f_(x));
  }
  Config config;

 private:
  nn::Embedding wte_{nullptr}, wpe_{nullptr};
  std::vector<Block> blocks_;
  nn::LayerNorm ln_f_{nullptr};
  nn::Linear head_{nullptr};
};
LOOM_MODULE(GPT);

// A seeded corpus with structure a small model learns in a few hundred
// steps: a random Markov chain over `vocab` tokens in which every token is
// followed by one of its four favourites 15 times in 16 (entropy about 1.6
// nats a token, against ln(vocab) for a model that learned nothing).
inline std::vector<int64_t> markov_corpus(int64_t vocab, int64_t length, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> favourite(static_cast<size_t>(vocab * 4));
  for (int64_t& f : favourite) f = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
  std::vector<int64_t> out = {0};
  while (static_cast<int64_t>(out.size()) < length) {
    const int64_t a = out.back();
    const uint64_t r = rng() % 16;
    out.push_back(r < 15 ? favourite[static_cast<size_t>(a * 4 + r % 4)]
                         : static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab)));
  }
  return out;
}

}  // namespace gpt
