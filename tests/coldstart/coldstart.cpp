// One "first step" of a small model in a fresh process: a softmax, a layer
// norm and a two-layer MLP forward. Prints what it compiled and how long the
// step took, for tests/coldstart/run.sh to compare a cold and a warm run.
#include <loom/loom.h>

#include <chrono>
#include <cstdio>

int main() {
  loom::set_backend("llvm");
  loom::manual_seed(0);
  auto x = loom::randn({64, 256});
  auto w1 = loom::randn({256, 256}) * 0.05;
  auto w2 = loom::randn({256, 10}) * 0.05;
  auto g = loom::ones({256});
  auto b = loom::zeros({256});
  loom::sync();
  loom::reset_metrics();

  auto t0 = std::chrono::steady_clock::now();
  auto mu = x.mean({-1}, true);
  auto var = (x - mu).pow(2).mean({-1}, true);
  auto ln = (x - mu) * loom::rsqrt(var + 1e-5) * g + b;
  loom::sync();
  auto h = loom::relu(ln.matmul(w1));
  auto logits = h.matmul(w2);
  auto p = loom::softmax(logits, -1);
  float check = p.sum().item<float>() + loom::logsumexp(logits, {1}).sum().item<float>();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  loom::Metrics m = loom::metrics();
  std::printf("jit_compiles=%lld disk_cache_hits=%lld first_step_ms=%.3f check=%.4f\n",
              static_cast<long long>(m.jit_compiles), static_cast<long long>(m.disk_cache_hits), ms, check);
  return 0;
}
