// gpt: a character-level GPT written against libtorch's C++ frontend and
// ported by changing the include and adding `namespace torch = loom;`:
// token and position embeddings, pre-norm blocks of causal self-attention
// (torch::scaled_dot_product_attention) and a GELU MLP, AdamW with a
// warm-up (LinearLR), clip_grad_norm_. It trains on text files (by default
// this repository's own documentation, given by CTest), holds out their
// last tenth, and stops once the held-out loss is at least 1 nat below the
// unigram entropy of the training characters, or at --seconds.
//
//   gpt --text FILE [--text FILE ...] [--steps N] [--seconds S] [--generate N]
//
// It trains at least --steps steps (default 2000) and until the target, at
// most --seconds (default 300), then continues the held-out text greedily.
// Exits with status 1 if the held-out loss never got 1 nat below the
// unigram entropy.
#include <loom/loom.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace torch = loom;

namespace {

struct Config {
  int64_t vocab = 0, block = 64, layers = 2, heads = 4, embd = 96;
};

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const Config& c) : heads(c.heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.embd})));
    qkv = register_module("qkv", torch::nn::Linear(c.embd, 3 * c.embd));
    proj = register_module("proj", torch::nn::Linear(c.embd, c.embd));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.embd})));
    fc = register_module("fc", torch::nn::Linear(c.embd, 4 * c.embd));
    out = register_module("out", torch::nn::Linear(4 * c.embd, c.embd));
  }
  torch::Tensor forward(torch::Tensor x) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    std::vector<torch::Tensor> parts = qkv->forward(ln1->forward(x)).split(C, 2);
    auto heads_of = [&](const torch::Tensor& t) { return t.view({B, T, heads, C / heads}).transpose(1, 2); };
    torch::Tensor y = torch::scaled_dot_product_attention(heads_of(parts[0]), heads_of(parts[1]), heads_of(parts[2]),
                                                          {}, 0.0, /*is_causal=*/true);
    x = x + proj->forward(y.transpose(1, 2).reshape({B, T, C}));
    return x + out->forward(torch::gelu(fc->forward(ln2->forward(x))));
  }
  int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
};
TORCH_MODULE(Block);

struct GPTImpl : torch::nn::Module {
  explicit GPTImpl(const Config& c) {
    wte = register_module("wte", torch::nn::Embedding(c.vocab, c.embd));
    wpe = register_module("wpe", torch::nn::Embedding(c.block, c.embd));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(Block(c));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.embd})));
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(c.embd, c.vocab).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    torch::Tensor x = wte->forward(idx) + wpe->forward(torch::arange(idx.size(1), torch::kLong));
    for (const auto& b : *blocks) x = b->as<Block>()->forward(x);
    return head->forward(ln_f->forward(x));
  }
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(GPT);

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  double seconds_limit = 300;
  int64_t generate = 200, min_steps = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--text") files.push_back(v);
    else if (a == "--seconds") seconds_limit = std::stod(v);
    else if (a == "--generate") generate = std::stoll(v);
    else if (a == "--steps") min_steps = std::stoll(v);
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: gpt --text FILE [--text FILE ...] [--steps N] [--seconds S] [--generate N]\n");
    return 2;
  }
  std::string text;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "gpt: cannot read %s\n", f.c_str());
      return 2;
    }
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // The vocabulary: every byte the text holds.
  std::map<unsigned char, int64_t> index;
  for (unsigned char ch : text) index.emplace(ch, 0);
  std::vector<unsigned char> chars;
  for (auto& kv : index) kv.second = static_cast<int64_t>(chars.size()), chars.push_back(kv.first);
  std::vector<int64_t> ids;
  for (unsigned char ch : text) ids.push_back(index[ch]);
  const int64_t split = static_cast<int64_t>(ids.size()) * 9 / 10;
  std::vector<double> counts(chars.size(), 0);
  for (int64_t i = 0; i < split; ++i) counts[static_cast<size_t>(ids[i])] += 1;
  double unigram = 0;
  for (double n : counts)
    if (n > 0) unigram -= n / split * std::log(n / split);

  Config config;
  config.vocab = static_cast<int64_t>(chars.size());
  const int64_t batch = 16, T = config.block;
  torch::manual_seed(0);
  const torch::Tensor data = torch::tensor(ids);
  const torch::Tensor train = data.slice(0, 0, split), held = data.slice(0, split, data.size(0));
  std::printf("%zu characters from %zu file(s), vocabulary %lld; unigram entropy %.3f nats: target held-out loss %.3f\n",
              text.size(), files.size(), static_cast<long long>(config.vocab), unigram, unigram - 1);

  GPT model(config);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  torch::optim::LinearLR warmup(optimizer, 0.1, 1.0, 50);
  std::mt19937_64 rng(1);
  auto batch_from = [&](const torch::Tensor& source) {
    std::uniform_int_distribution<int64_t> start(0, source.size(0) - T - 2);
    std::vector<torch::Tensor> xs, ys;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t i = start(rng);
      xs.push_back(source.slice(0, i, i + T));
      ys.push_back(source.slice(0, i + 1, i + T + 1));
    }
    return std::make_pair(torch::stack(xs), torch::stack(ys));
  };
  auto held_out_loss = [&] {
    torch::NoGradGuard no_grad;
    model->eval();
    double sum = 0;
    for (int k = 0; k < 8; ++k) {
      auto [x, y] = batch_from(held);
      sum += torch::nn::functional::cross_entropy(model->forward(x).view({-1, config.vocab}), y.view({-1})).item<double>();
    }
    model->train();
    return sum / 8;
  };

  const auto t0 = std::chrono::steady_clock::now();
  double held_loss = 1e9, reached_at = -1;
  int64_t step = 0;
  for (;; ++step) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step % 100 == 0) {
      held_loss = held_out_loss();
      const torch::Metrics m = torch::metrics();
      std::printf("step %5lld  %6.1f s  held-out loss %.3f  (compiled %lld graphs, %.1f s; replayed %lld)\n",
                  static_cast<long long>(step), elapsed, held_loss, static_cast<long long>(m.cache_misses),
                  m.compile_ns / 1e9, static_cast<long long>(m.cache_hits));
      if (held_loss <= unigram - 1 && reached_at < 0) reached_at = elapsed;
      if (reached_at >= 0 && step >= min_steps) break;
    }
    if (elapsed > seconds_limit) break;
    auto [x, y] = batch_from(train);
    optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x).view({-1, config.vocab}), y.view({-1}));
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
    warmup.step();
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const torch::Metrics m = torch::metrics();
  std::printf("\n%lld steps in %.1f s (%.1f s compiling, then %.1f steps/s, %.0f tokens/s)\n",
              static_cast<long long>(step), total, m.compile_ns / 1e9, step / std::max(total - m.compile_ns / 1e9, 1e-9),
              step * batch * T / std::max(total - m.compile_ns / 1e9, 1e-9));
  if (reached_at >= 0)
    std::printf("held-out loss below %.3f (unigram entropy - 1 nat) after %.1f s; %.3f at the end\n", unigram - 1,
                reached_at, held_loss);
  else
    std::printf("held-out loss %.3f did not reach %.3f within %.0f s\n", held_loss, unigram - 1, seconds_limit);

  if (generate > 0) {
    // Greedy continuation of the held-out text's first line.
    torch::NoGradGuard no_grad;
    model->eval();
    std::vector<int64_t> context(ids.begin() + split, ids.begin() + split + 16);
    std::string out;
    for (int64_t i = 0; i < generate; ++i) {
      const int64_t n = static_cast<int64_t>(context.size()), from = std::max<int64_t>(0, n - T);
      torch::Tensor idx = torch::tensor(std::vector<int64_t>(context.begin() + from, context.end())).view({1, -1});
      const int64_t next = model->forward(idx).select(1, idx.size(1) - 1).argmax(-1).item<int64_t>();
      context.push_back(next);
      out.push_back(static_cast<char>(chars[static_cast<size_t>(next)]));
    }
    std::printf("\ngenerated: %s\n", out.c_str());
  }
  return reached_at >= 0 ? 0 : 1;
}
