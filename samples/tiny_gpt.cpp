// tiny_gpt: trains a small GPT (samples/gpt_model.h: 2 layers, 64 wide, 4
// heads, context 64) on a seeded Markov-chain corpus the way a libtorch
// user writes it, then generates text from it. Every training step is one
// graph (forward, backward, clipping, AdamW), compiled once and replayed.
//
//   tiny_gpt                              # 200 steps on the CPU
//   tiny_gpt --device cuda                # the same on the first GPU
//   tiny_gpt --batching slice             # data.slice(0, i, i + T) stacked (nanoGPT's get_batch)
//   tiny_gpt --batching index_select      # index_select of positions i + arange(T)
//   tiny_gpt --clip item|lazy|none        # clip_grad_norm_ (reads the norm: two graphs a
//                                         # step), the same clipping kept lazy (one graph), none
//   tiny_gpt --generate 200 [--no-read]   # greedy generation; --no-read keeps every token lazy
//   tiny_gpt --generate 200 --window      # the context a fixed window of `block` tokens
//
// Prints the loss as it falls, steps/s after the first (compiling) step,
// and what the runtime did. Exits 1 if the loss does not fall below --target.
#include <loom/loom.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "gpt_model.h"

namespace F = loom::nn::functional;
using Clock = std::chrono::steady_clock;
using loom::Tensor;

namespace {

struct Options {
  std::string device = "cpu", batching = "slice", clip = "item";
  int64_t steps = 200, batch = 16, generate = 0;
  bool read_each_token = true;
  bool window = false;  // generation's context: a fixed window, or growing as nanoGPT's
  double lr = 3e-3, target = -1;
  uint64_t seed = 1;
  gpt::Config model;  // --embd, --layers, --heads, --block
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One batch of B windows of T tokens at random positions: inputs and the
// next-token targets, as nanoGPT's get_batch does.
std::pair<Tensor, Tensor> get_batch(const Tensor& data, const Options& o, int64_t T, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> pick(0, data.size(0) - T - 2);
  std::vector<int64_t> starts(static_cast<size_t>(o.batch));
  for (int64_t& s : starts) s = pick(rng);
  if (o.batching == "slice") {
    std::vector<Tensor> xs, ys;
    for (int64_t i : starts) {
      xs.push_back(data.slice(0, i, i + T));
      ys.push_back(data.slice(0, i + 1, i + 1 + T));
    }
    return {loom::stack(xs), loom::stack(ys)};
  }
  // index_select of every position: starts as a [B, 1] tensor plus arange(T).
  Tensor at = loom::tensor(starts).to(data.device()).view({o.batch, 1}) +
              loom::arange(T, loom::TensorOptions(loom::kLong).device(data.device()));
  return {data.index_select(0, at.flatten()).view({o.batch, T}),
          data.index_select(0, (at + 1).flatten()).view({o.batch, T})};
}

// libtorch's clip_grad_norm_, kept lazy: no norm is read, so the clipping
// joins the step's one graph.
void clip_lazily(const std::vector<Tensor>& params, double max_norm) {
  loom::NoGradGuard no_grad;
  std::vector<Tensor> norms;
  for (const Tensor& p : params)
    if (p.grad().defined()) norms.push_back(p.grad().norm());
  Tensor total = loom::stack(norms).norm();
  Tensor coef = (max_norm / (total + 1e-6)).clamp(std::nullopt, 1.0);
  for (const Tensor& p : params)
    if (p.grad().defined()) p.grad().data().mul_(coef);
}

int run(const Options& o) {
  const loom::Device device = o.device == "cuda" ? loom::Device(loom::kCUDA) : loom::Device(loom::kCPU);
  const gpt::Config cfg = o.model;
  loom::manual_seed(o.seed);
  gpt::GPT model(cfg);
  model->to(device);
  loom::optim::AdamW opt(model->parameters(), loom::optim::AdamWOptions(o.lr).weight_decay(0.1));
  const std::vector<int64_t> corpus = gpt::markov_corpus(cfg.vocab, 100000, o.seed);
  const Tensor data = loom::tensor(corpus).to(device);
  std::printf("tiny_gpt: %lld parameters, corpus %zu tokens, %s, batch %lld x %lld, batching %s, clip %s\n",
              static_cast<long long>([&] {
                int64_t n = 0;
                for (const Tensor& p : model->parameters()) n += p.numel();
                return n;
              }()),
              corpus.size(), device.str().c_str(), static_cast<long long>(o.batch),
              static_cast<long long>(cfg.block), o.batching.c_str(), o.clip.c_str());

  std::mt19937_64 rng(o.seed + 1);
  loom::reset_metrics();
  const auto t_start = Clock::now();
  Clock::time_point t_steady{};
  double first_loss = 0, last_loss = 0;
  for (int64_t step = 0; step < o.steps; ++step) {
    if (step == 1) t_steady = Clock::now();
    auto [x, y] = get_batch(data, o, cfg.block, rng);
    Tensor logits = model->forward(x);
    Tensor loss = F::cross_entropy(logits.view({-1, cfg.vocab}), y.view({-1}));
    opt.zero_grad();
    loss.backward();
    if (o.clip == "item") loom::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    else if (o.clip == "lazy") clip_lazily(model->parameters(), 1.0);
    opt.step();
    if (step == 0 || step + 1 == o.steps || (step + 1) % 50 == 0) {
      last_loss = loss.item<float>();
      if (step == 0) first_loss = last_loss;
      std::printf("step %4lld  loss %.4f\n", static_cast<long long>(step + 1), last_loss);
    }
  }
  loom::sync();
  if (device.is_cuda()) loom::cuda::synchronize();
  const double total_s = seconds_since(t_start);
  const double steady_s = o.steps > 1 ? seconds_since(t_steady) : 0;
  const loom::Metrics m = loom::metrics();
  std::printf("%lld steps in %.2f s; after the first step %.1f steps/s (the first compiled: %.2f s)\n",
              static_cast<long long>(o.steps), total_s, o.steps > 1 ? (o.steps - 1) / steady_s : 0.0,
              total_s - steady_s);
  std::printf("graphs run %lld: compiled %lld, replayed %lld; compile %.2f s (%lld NVRTC programs, %.2f s); "
              "disk cache: %lld loads, %lld stores\n",
              static_cast<long long>(m.graphs_materialized), static_cast<long long>(m.cache_misses),
              static_cast<long long>(m.cache_hits), m.compile_ns / 1e9, static_cast<long long>(m.nvrtc_compiles),
              m.nvrtc_compile_ns / 1e9, static_cast<long long>(m.disk_cache_hits),
              static_cast<long long>(m.disk_cache_writes));

  if (o.generate > 0) {
    // Greedy decoding as nanoGPT's generate() writes it: from an 8-token
    // prompt, the context grows by one token a step and is cropped to the
    // last `block` tokens once it is longer. With --window the context is
    // always the last `block` tokens (from a prompt of that length): every
    // step has the same shapes.
    loom::NoGradGuard no_grad;
    model->eval();
    loom::reset_metrics();
    const auto t0 = Clock::now();
    Tensor idx = data.slice(0, 0, o.window ? cfg.block : 8).view({1, -1}).clone();
    std::vector<int64_t> generated;
    std::vector<Tensor> lazy_tokens;
    for (int64_t i = 0; i < o.generate; ++i) {
      const int64_t T = idx.size(1);
      Tensor cond = T <= cfg.block ? idx : idx.slice(1, T - cfg.block, T);
      Tensor logits = model->forward(cond);
      Tensor next = logits.select(1, cond.size(1) - 1).argmax(-1).view({1, 1});
      idx = loom::cat({o.window ? idx.slice(1, 1, T) : idx, next}, 1);
      if (o.read_each_token) generated.push_back(next.item<int64_t>());
      else lazy_tokens.push_back(next);
    }
    if (!o.read_each_token)
      for (const Tensor& t : lazy_tokens) generated.push_back(t.item<int64_t>());
    const double s = seconds_since(t0);
    const loom::Metrics g = loom::metrics();
    std::printf("generated %lld tokens in %.2f s (%.1f tokens/s, %s, %s context); graphs run %lld: compiled %lld, "
                "replayed %lld, cut %lld; compile %.2f s\n",
                static_cast<long long>(o.generate), s, o.generate / s,
                o.read_each_token ? "a read per token" : "no read inside the loop", o.window ? "window" : "growing",
                static_cast<long long>(g.graphs_materialized), static_cast<long long>(g.cache_misses),
                static_cast<long long>(g.cache_hits), static_cast<long long>(g.graph_cuts), g.compile_ns / 1e9);
    std::printf("tokens:");
    for (size_t i = 0; i < generated.size() && i < 24; ++i) std::printf(" %lld", static_cast<long long>(generated[i]));
    std::printf("%s\n", generated.size() > 24 ? " ..." : "");
  }
  const double target = o.target >= 0 ? o.target : (o.steps >= 200 ? 0.8 * first_loss : first_loss);
  if (o.steps > 1 && !(last_loss < target)) {
    std::printf("the loss did not fall below %.3f\n", target);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const char* usage =
      "usage: tiny_gpt [--device cpu|cuda] [--steps N] [--batch N] [--batching slice|index_select]\n"
      "                [--clip item|lazy|none] [--lr X] [--seed N] [--generate N] [--no-read] [--window]\n"
      "                [--target LOSS] [--embd N] [--layers N] [--heads N] [--block N]\n";
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
        return argv[++i];
      };
      if (a == "--device") o.device = next();
      else if (a == "--steps") o.steps = std::stoll(next());
      else if (a == "--batch") o.batch = std::stoll(next());
      else if (a == "--batching") o.batching = next();
      else if (a == "--clip") o.clip = next();
      else if (a == "--lr") o.lr = std::stod(next());
      else if (a == "--seed") o.seed = std::stoull(next());
      else if (a == "--generate") o.generate = std::stoll(next());
      else if (a == "--no-read") o.read_each_token = false;
      else if (a == "--window") o.window = true;
      else if (a == "--embd") o.model.embd = std::stoll(next());
      else if (a == "--layers") o.model.layers = std::stoll(next());
      else if (a == "--heads") o.model.heads = std::stoll(next());
      else if (a == "--block") o.model.block = std::stoll(next());
      else if (a == "--target") o.target = std::stod(next());
      else if (a == "--help" || a == "-h") {
        std::cout << usage;
        return 0;
      } else {
        std::cerr << usage;
        return 2;
      }
    }
    if ((o.device != "cpu" && o.device != "cuda") || (o.batching != "slice" && o.batching != "index_select") ||
        (o.clip != "item" && o.clip != "lazy" && o.clip != "none") || o.steps < 0 || o.batch < 1 || o.model.embd < 1 ||
        o.model.layers < 1 || o.model.heads < 1 || o.model.embd % o.model.heads != 0 || o.model.block < 2) {
      std::cerr << usage;
      return 2;
    }
    if (o.device == "cuda" && !loom::cuda::is_available()) {
      std::printf("tiny_gpt: skipped, no CUDA device (%s)\n", loom::cuda::unavailable_reason().c_str());
      return 0;
    }
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "tiny_gpt: " << e.what() << "\n";
    return 2;
  }
}
