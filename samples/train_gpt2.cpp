// train_gpt2: trains WORKLOADS.md's W7 model (samples/gpt2_model.h) from the
// command line and prints the loss and tokens per second: GPT-2 small
// (--size gpu) or the small CPU form (--size cpu, the default), AdamW,
// clipping at 1.0, bfloat16 autocast with --amp bf16.
//
//   train_gpt2 [--size cpu|gpu] [--device cpu|cuda] [--amp bf16|off] [--steps N] [--batch B] [--text FILE]
//              [--generate N]
//
// --generate N then continues the corpus's first 16 tokens greedily for N
// tokens with a key/value cache (gpt2::generate): the prompt is one graph,
// every decoding step the same other graph, replayed; it prints the tokens,
// the decoding rate and the graphs compiled while decoding.
//
// The tokens are a file's bytes (--text), or a generated Markov chain whose
// every token mostly follows one of four favourites, so the loss falls well
// below ln(vocab) within a few hundred steps. Exits with status 1 if the
// last loss is not below the first.
#include <loom/loom.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gpt2_model.h"

namespace {

std::vector<int64_t> tokens_of(const std::string& path, int64_t vocab, int64_t n) {
  std::vector<int64_t> out;
  if (!path.empty()) {
    std::ifstream in(path, std::ios::binary);
    for (std::istreambuf_iterator<char> it(in), end; it != end; ++it) out.push_back(static_cast<unsigned char>(*it));
    if (!out.empty()) return out;
    std::fprintf(stderr, "cannot read %s; using generated tokens\n", path.c_str());
  }
  std::mt19937_64 rng(1);
  std::vector<int64_t> favourite(static_cast<size_t>(vocab * 4));
  for (int64_t& f : favourite) f = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
  out = {0};
  while (static_cast<int64_t>(out.size()) < n) {
    const uint64_t r = rng() % 16;
    out.push_back(r < 15 ? favourite[static_cast<size_t>(out.back() * 4 + static_cast<int64_t>(r % 4))]
                         : static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab)));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string size = "cpu", text;
  loom::Device device = loom::kCPU;
  bool amp = false;
  int steps = 200;
  int64_t batch = -1, generate = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--size") size = v;
    else if (a == "--device") device = v == "cuda" ? loom::Device(loom::kCUDA) : loom::Device(loom::kCPU);
    else if (a == "--amp") amp = v == "bf16";
    else if (a == "--steps") steps = std::stoi(v);
    else if (a == "--batch") batch = std::stoll(v);
    else if (a == "--text") text = v;
    else if (a == "--generate") generate = std::stoll(v);
  }
  const gpt2::Config cfg = size == "gpu" ? gpt2::Config::gpu() : gpt2::Config::cpu();
  if (batch < 0) batch = size == "gpu" ? 8 : 4;
  loom::manual_seed(0);
  gpt2::GPT model(cfg);
  model->to(device);
  loom::optim::AdamW opt(model->parameters(), loom::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).weight_decay(0.1));
  const std::vector<int64_t> corpus = tokens_of(text, cfg.vocab, 200000);
  const loom::Tensor data = loom::tensor(corpus);
  std::mt19937_64 rng(2);
  std::printf("GPT: %lld layers, %lld heads, width %lld, vocabulary %lld, context %lld, batch %lld, %s%s\n",
              static_cast<long long>(cfg.layers), static_cast<long long>(cfg.heads), static_cast<long long>(cfg.embd),
              static_cast<long long>(cfg.vocab), static_cast<long long>(cfg.block), static_cast<long long>(batch),
              device.is_cuda() ? "cuda" : "cpu", amp ? ", bfloat16 autocast" : "");
  double first = 0, last = 0, seconds = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<loom::Tensor> rows;
    for (int64_t b = 0; b < batch; ++b) {
      const auto at = static_cast<int64_t>(rng() % (corpus.size() - static_cast<size_t>(cfg.block) - 1));
      rows.push_back(data.slice(0, at, at + cfg.block + 1));
    }
    const loom::Tensor idx = loom::stack(rows).to(device);
    const auto t0 = std::chrono::steady_clock::now();
    const double loss = gpt2::train_step(model, opt, idx, amp).item<double>();
    if (step >= 2) seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step == 0) first = loss;
    last = loss;
    if (step % 20 == 0 || step + 1 == steps) std::printf("step %4d  loss %.4f\n", step, loss);
  }
  if (steps > 2) std::printf("%.0f tokens/s after the first two steps\n", (steps - 2) * batch * cfg.block / seconds);
  if (generate > 0) {
    const int64_t prompt_length = 16;
    const loom::Tensor prompt = data.slice(0, 0, prompt_length).view({1, prompt_length}).to(device);
    // Two tokens first: the prompt's graph and the first step's compile.
    loom::sync();
    gpt2::generate(model, prompt, 2, cfg.block);
    const loom::Metrics before = loom::metrics();
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int64_t> out = gpt2::generate(model, prompt, generate, cfg.block);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const loom::Metrics after = loom::metrics();
    std::printf("generated:");
    for (int64_t t : out) std::printf(" %lld", static_cast<long long>(t));
    std::printf("\n%zu tokens in %.1f ms: %.0f tokens/s; graphs compiled while generating: %lld\n", out.size(), s * 1e3,
                static_cast<double>(out.size()) / s, static_cast<long long>(after.cache_misses - before.cache_misses));
  }
  return last < first ? 0 : 1;
}
