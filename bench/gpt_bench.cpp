// loom-gpt-bench: what a small GPT (samples/gpt_model.h) costs loom beyond
// its kernels, in peers.py's row format. Each cold row runs in a fresh
// process with the disk cache off (LOOM_CACHE_DIR=off), so nothing
// compiled before is reused.
//
//   loom-gpt-bench [--only K1,K2,G1,G2,S1] [--device cpu|cuda]
//
//   K1  compile of a 10,000-node graph of repeated structure: greedy
//       generation over a fixed window, never read, one graph of ~10k nodes
//   K2  the same with growing shapes (nanoGPT's generate: the context grows
//       a token a step): every step's kernels have new shapes
//   G1  200 generated tokens, fixed window: one read per token, and none
//       (the loop is cut automatically); their ratio
//   G2  the same with a growing context (slow to read: a new shape, so a new
//       compile, every token until symbolic sizes exist)
//   S1  a training step (2 layers, 128 wide, T 64, batch 32, AdamW, clip
//       1.0): clip_grad_norm_ kept lazy (one graph) against read
//       (libtorch's: the norm's item() splits the step in two graphs)
#include <loom/loom.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "../samples/gpt_model.h"

namespace {

using Clock = std::chrono::steady_clock;
using loom::Tensor;

std::string g_self, g_device = "cpu";
loom::Device g_dev(loom::kCPU);

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

void row_ms(const std::string& workload, const std::string& peer, double seconds, const std::string& extra = "") {
  std::printf("%-40s %-22s %-5s %10.4f ms  %s\n", workload.c_str(), peer.c_str(), g_device.c_str(), seconds * 1e3,
              extra.c_str());
  std::fflush(stdout);
}
void row_value(const std::string& workload, const std::string& key, double value) {
  std::printf("# %-40s %s=%.3f\n", workload.c_str(), key.c_str(), value);
  std::fflush(stdout);
}

// ---------------------------------------------------------------- generation

// A model with fresh weights on the bench's device, in eval mode, and a
// first context: a fixed window of `block` tokens, or an 8-token prompt.
struct Decoder {
  gpt::Config cfg;
  gpt::GPT model{nullptr};
  Tensor idx;
  explicit Decoder(bool window) {
    loom::manual_seed(1);
    model = gpt::GPT(cfg);
    model->to(g_dev);
    model->eval();
    idx = (loom::arange(window ? cfg.block : 8, loom::kLong) % cfg.vocab).view({1, -1}).to(g_dev);
    loom::sync();
  }
  // One greedy step, as nanoGPT's generate(): the context cropped to the
  // last `block` tokens; the next token appended (a window drops its first).
  Tensor step(bool window) {
    const int64_t T = idx.size(1);
    Tensor cond = T <= cfg.block ? idx : idx.slice(1, T - cfg.block, T);
    Tensor next = model->forward(cond).select(1, cond.size(1) - 1).argmax(-1).view({1, 1});
    idx = loom::cat({window ? idx.slice(1, 1, T) : idx, next}, 1);
    return next;
  }
};

// Greedy generation of `tokens` tokens from a model with fresh weights; the
// context a fixed window of `block` tokens, or growing from an 8-token prompt
// as nanoGPT's generate() (cropped to the last `block`).
struct Generated {
  double seconds = 0;
  loom::Metrics metrics;
  size_t first_graph_nodes = 0;
};
Generated generate(int64_t tokens, bool window, bool read_each) {
  loom::NoGradGuard no_grad;
  Decoder d(window);
  loom::reset_metrics();
  const auto t0 = Clock::now();
  std::vector<Tensor> lazy;
  int64_t checksum = 0;
  for (int64_t i = 0; i < tokens; ++i) {
    Tensor next = d.step(window);
    if (read_each) checksum += next.item<int64_t>();
    else lazy.push_back(next);
  }
  for (const Tensor& t : lazy) checksum += t.item<int64_t>();
  Generated g;
  g.seconds = seconds_since(t0);
  g.metrics = loom::metrics();
  std::printf("checksum=%lld\n", static_cast<long long>(checksum));
  return g;
}

// The compile of one ~10k-node graph: `per_graph` tokens recorded with no
// read and no automatic cut, then one sync.
void compile_child(bool window) {
  loom::NoGradGuard no_grad;
  Decoder d(window);
  loom::set_max_pending_nodes(1 << 30);
  loom::reset_metrics();
  size_t nodes = 0;
  while (nodes < 10000) {
    d.step(window);
    loom::testing::graph_key(d.idx, &nodes);
  }
  const auto t0 = Clock::now();
  loom::sync();
  const double s = seconds_since(t0);
  const loom::Metrics m = loom::metrics();
  std::printf("result seconds=%.6f nodes=%zu compile_s=%.6f functions=%lld\n", s, nodes, m.compile_ns / 1e9,
              static_cast<long long>(m.kernels_compiled));
}

// ---------------------------------------------------------------- training step

struct Step {
  gpt::Config cfg;
  int64_t batch = 32;
  gpt::GPT model{nullptr};
  std::unique_ptr<loom::optim::AdamW> opt;
  Tensor data;
  std::mt19937_64 rng{2};
  Step() {
    cfg.embd = 128;
    loom::manual_seed(1);
    model = gpt::GPT(cfg);
    model->to(g_dev);
    opt = std::make_unique<loom::optim::AdamW>(model->parameters(), loom::optim::AdamWOptions(3e-4).weight_decay(0.1));
    data = loom::tensor(gpt::markov_corpus(cfg.vocab, 100000, 1)).to(g_dev);
  }
  void run(bool lazy_clip) {
    std::vector<Tensor> xs, ys;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t i = static_cast<int64_t>(rng() % 90000);
      xs.push_back(data.slice(0, i, i + cfg.block));
      ys.push_back(data.slice(0, i + 1, i + 1 + cfg.block));
    }
    Tensor loss = gpt::F::cross_entropy(model->forward(loom::stack(xs)).view({-1, cfg.vocab}), loom::stack(ys).view({-1}));
    opt->zero_grad();
    loss.backward();
    if (lazy_clip) {
      loom::NoGradGuard no_grad;
      std::vector<Tensor> norms;
      for (const Tensor& p : model->parameters()) norms.push_back(p.grad().norm());
      Tensor coef = (1.0 / (loom::stack(norms).norm() + 1e-6)).clamp(std::nullopt, 1.0);
      for (const Tensor& p : model->parameters()) p.grad().data().mul_(coef);
    } else {
      loom::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    }
    opt->step();
    loss.item<float>();
  }
};

void s1(const std::string& peer) {
  Step fused, split;
  for (int i = 0; i < 5; ++i) fused.run(true), split.run(false);
  std::vector<double> tf, ts;
  const auto start = Clock::now();
  while (tf.size() < 20 || seconds_since(start) < 4) {  // alternating: the machine's drift hits both alike
    auto t0 = Clock::now();
    fused.run(true);
    tf.push_back(seconds_since(t0));
    t0 = Clock::now();
    split.run(false);
    ts.push_back(seconds_since(t0));
    if (tf.size() >= 400) break;
  }
  row_ms("S1 gpt-step clip lazy (one graph)", peer, median(tf));
  row_ms("S1 gpt-step clip item (two graphs)", peer, median(ts));
  row_value("S1 fused/split", "ratio", median(tf) / median(ts));
}

// ---------------------------------------------------------------- children

// Runs this binary with `args` in a fresh process, the disk cache off;
// returns the values of its "result" line (key=value words).
std::map<std::string, double> in_child(const std::string& args) {
  const std::string cmd = "LOOM_CACHE_DIR=off '" + g_self + "' --device " + g_device + " --child " + args;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw loom::Error("cannot start " + g_self);
  std::map<std::string, double> out;
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    if (std::strncmp(line, "result ", 7) != 0) continue;
    std::istringstream words(line + 7);
    std::string w;
    while (words >> w)
      if (auto eq = w.find('='); eq != std::string::npos) out[w.substr(0, eq)] = std::stod(w.substr(eq + 1));
  }
  if (pclose(p) != 0 || out.empty()) throw loom::Error("the child process failed: " + cmd);
  return out;
}

int child(const std::string& what, const std::vector<std::string>& rest) {
  if (what == "compile-window" || what == "compile-grow") {
    compile_child(what == "compile-window");
    return 0;
  }
  if (what == "generate") {  // generate TOKENS window|grow read|noread
    const Generated g = generate(std::stoll(rest.at(0)), rest.at(1) == "window", rest.at(2) == "read");
    std::printf("result seconds=%.6f compiles=%lld replays=%lld cuts=%lld compile_s=%.6f\n", g.seconds,
                static_cast<long long>(g.metrics.cache_misses), static_cast<long long>(g.metrics.cache_hits),
                static_cast<long long>(g.metrics.graph_cuts), g.metrics.compile_ns / 1e9);
    return 0;
  }
  std::fprintf(stderr, "unknown child %s\n", what.c_str());
  return 2;
}

void k_row(const std::string& peer, bool window) {
  const auto r = in_child(window ? "compile-window" : "compile-grow");
  const std::string name = window ? "K1 compile 10k-node graph, repeated" : "K2 compile 10k-node graph, growing";
  std::ostringstream extra;
  extra << "nodes=" << static_cast<long long>(r.at("nodes")) << " functions=" << static_cast<long long>(r.at("functions"));
  row_ms(name, peer, r.at("compile_s"), extra.str());
}

void g_rows(const std::string& peer, bool window) {
  const std::string ctx = window ? "window" : "grow";
  const auto read = in_child("generate 200 " + ctx + " read");
  const auto none = in_child("generate 200 " + ctx + " noread");
  const std::string name = window ? "G1 generate 200 window" : "G2 generate 200 growing";
  auto extra = [](const std::map<std::string, double>& r) {
    std::ostringstream o;
    o << "compiles=" << static_cast<long long>(r.at("compiles")) << " cuts=" << static_cast<long long>(r.at("cuts"))
      << " compile_s=" << r.at("compile_s");
    return o.str();
  };
  row_ms(name + " read each", peer, read.at("seconds"), extra(read));
  row_ms(name + " no read", peer, none.at("seconds"), extra(none));
  row_value(name + " no-read/read", "ratio", none.at("seconds") / read.at("seconds"));
}

}  // namespace

int main(int argc, char** argv) {
  {
    char path[4096];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    g_self = n > 0 ? std::string(path, static_cast<size_t>(n)) : argv[0];
  }
  std::string only = "K1,K2,G1,S1";
  std::string child_what;
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--device" && i + 1 < argc) g_device = argv[++i];
    else if (a == "--child" && i + 1 < argc) child_what = argv[++i];
    else if (!child_what.empty()) rest.push_back(a);
    else {
      std::fprintf(stderr, "usage: loom-gpt-bench [--only K1,K2,G1,G2,S1] [--device cpu|cuda]\n");
      return 2;
    }
  }
  if (g_device != "cpu" && g_device != "cuda") {
    std::fprintf(stderr, "loom-gpt-bench: unknown device %s\n", g_device.c_str());
    return 2;
  }
  if (g_device == "cuda") {
    if (!loom::cuda::is_available()) {
      std::printf("# loom-gpt-bench: no GPU here (%s)\n", loom::cuda::unavailable_reason().c_str());
      return 0;
    }
    g_dev = loom::Device(loom::kCUDA, 0);
  }
  try {
    if (!child_what.empty()) return child(child_what, rest);
    const std::string peer = "loom-" + std::string(g_device == "cuda" ? "cuda" : loom::backend_name(loom::kCPU));
    std::set<std::string> want;
    std::stringstream ss(only);
    for (std::string id; std::getline(ss, id, ',');) want.insert(id);
    if (want.count("K1")) k_row(peer, true);
    if (want.count("K2")) k_row(peer, false);
    if (want.count("G1")) g_rows(peer, true);
    if (want.count("G2")) g_rows(peer, false);
    if (want.count("S1")) s1(peer);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-gpt-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
