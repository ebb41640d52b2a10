// loom-bench: the standard workloads of shared/bench-peers/WORKLOADS.md,
// printed in peers.py's row format so the two tables sit side by side.
//
//   loom-bench [--only W1,O1,...] [--device cpu|cuda] [--backend reference|llvm|cuda]
//
// Every figure is a median over repeated runs after warm-up. A W row times
// "record the workload + loom::sync()", i.e. what a user's loop pays per call
// once its graph is cached; inputs are random normal and materialized before
// the clock starts. O rows time the lazy machinery itself (see README.md).
#include <loom/loom.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <immintrin.h>
#include <sched.h>
#include <thread>
#include <unistd.h>

#include "../samples/gpt2_model.h"
#include "../samples/resnet18_model.h"

#ifdef LOOM_BENCH_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// How long to keep repeating a workload (as peers.py: at least `min_reps`
// and at least `min_s` seconds, never more than `max_reps`).
struct Repeats {
  int warmup = 2;
  int min_reps = 5;
  double min_s = 0.5;
  int max_reps = 2000;
};

// Median seconds per call of fn(); fn must include its own materialization.
double median_time(const std::function<void()>& fn, const Repeats& r) {
  for (int i = 0; i < r.warmup; ++i) fn();
  std::vector<double> times;
  auto start = Clock::now();
  while ((static_cast<int>(times.size()) < r.min_reps || seconds_since(start) < r.min_s) &&
         static_cast<int>(times.size()) < r.max_reps) {
    auto t0 = Clock::now();
    fn();
    times.push_back(seconds_since(t0));
  }
  return median(times);
}

// ---------------------------------------------------------------- rows (peers.py's format)

std::string g_device = "cpu";

// The rows again as JSON objects, peers.py --json's keys (workload, peer,
// device, ms, GB/s or GFLOP/s, error), for --json and bench/charts.py.
std::vector<std::string> g_json_rows;

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}
void json_row(const std::string& workload, const std::string& peer, const std::string& rest) {
  g_json_rows.push_back("{\"workload\": " + json_string(workload) + ", \"peer\": " + json_string(peer) +
                        ", \"device\": " + json_string(g_device) + ", " + rest + "}");
}
std::string json_number(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

void row_ms(const std::string& workload, const std::string& peer, double seconds, const char* rate_key = nullptr,
            double rate = 0) {
  char extra[64] = "";
  if (rate_key) std::snprintf(extra, sizeof extra, "%s=%.1f", rate_key, rate);
  std::printf("%-28s %-18s %-5s %10.4f ms  %s\n", workload.c_str(), peer.c_str(), g_device.c_str(), seconds * 1e3,
              extra);
  std::fflush(stdout);
  json_row(workload, peer, "\"ms\": " + json_number(seconds * 1e3) +
                               (rate_key ? ", " + json_string(rate_key) + ": " + json_number(rate) : ""));
}

void row_value(const std::string& workload, const std::string& key, double value) {
  std::printf("%-28s %-18s %-5s    %s=%.1f\n", workload.c_str(), "loom", g_device.c_str(), key.c_str(), value);
  std::fflush(stdout);
  json_row(workload, "loom", json_string(key) + ": " + json_number(value));
}

void row_error(const std::string& workload, const std::string& peer, const std::string& error) {
  std::printf("%-28s %-18s %-5s ERROR %s\n", workload.c_str(), peer.c_str(), g_device.c_str(), error.c_str());
  std::fflush(stdout);
  json_row(workload, peer, "\"error\": " + json_string(error));
}

// Writes the rows collected so far to `path` as a JSON array (peers.py's form).
bool write_json(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::fputs("[\n", f);
  for (size_t i = 0; i < g_json_rows.size(); ++i)
    std::fprintf(f, " %s%s\n", g_json_rows[i].c_str(), i + 1 < g_json_rows.size() ? "," : "");
  std::fputs("]\n", f);
  return std::fclose(f) == 0;
}

// ---------------------------------------------------------------- inputs

loom::Device g_dev(loom::kCPU);

// The end of one timed call: the graph is materialized and, on a GPU, has
// finished running (peers.py reads the clock after torch.cuda.synchronize).
void finish() {
  loom::sync(g_dev);
  if (g_dev.is_cuda()) loom::cuda::synchronize(g_dev.index());
}

// Random normal float32, computed now so the timed region only reads it.
loom::Tensor input(std::vector<int64_t> sizes, double scale = 1.0) {
  loom::Tensor t = loom::randn(sizes, loom::TensorOptions(loom::kFloat32).device(g_dev));
  if (scale != 1.0) t = t * scale;
  finish();
  return t;
}

// The "big" workloads (W0-W3) run for seconds per call on the reference
// backend: fewer repeats there keep the default run under two minutes.
Repeats big_repeats() {
  Repeats r;
  r.warmup = 1;
  r.min_reps = 5;
  r.min_s = 0.5;
  return r;
}

// ---------------------------------------------------------------- W rows

// On a GPU, W0-W3 are timed a second way, as WORKLOADS.md allows ("or
// with device events"): runs of kQueued calls queued back to back
// (loom::sync launches the graph and returns) between two loom::cuda::Events,
// so the host's recording and launching overlap the GPU's work instead of
// adding to each call; the row is the median over runs of GPU time per call.
// W0 is timed the same way, so the ratio of these rows compares like with
// like. The first call of a run still waits for the host (~5 us of 20 calls).
void event_row(const char* name, const std::string& peer, const std::function<void()>& queue_one, double bytes) {
  if (!g_dev.is_cuda()) return;
  constexpr int kQueued = 20, kRuns = 7;
  std::vector<double> per_call;
  for (int run = -1; run < kRuns; ++run) {  // run -1 warms up
    loom::cuda::Event start, end;
    start.record(g_dev.index());
    for (int i = 0; i < kQueued; ++i) queue_one();
    end.record(g_dev.index());
    const double s = start.elapsed_time(end) / 1e3 / kQueued;
    if (run >= 0) per_call.push_back(s);
  }
  finish();
  const double t = median(per_call);
  row_ms(name, peer + "-events", t, "GB/s", bytes / t / 1e9);
}

// A W0-W3 row: `queue_one` records one call and launches it (loom::sync);
// the plain row waits for each call, as peers.py does.
void bandwidth_rows(const char* name, const std::string& peer, const std::function<void()>& queue_one, double bytes) {
  double t = median_time(
      [&] {
        queue_one();
        finish();
      },
      big_repeats());
  row_ms(name, peer, t, "GB/s", bytes / t / 1e9);
  event_row(name, peer, queue_one, bytes);
}

void w0(const std::string& peer) {
  const int64_t n = int64_t{1} << 26;
  loom::Tensor src = input({n});
  loom::Tensor dst = input({n});  // preallocated: materialized once, written in place each call
  bandwidth_rows(
      "W0 copy-ceiling 256MiB f32", peer,
      [&] {
        dst.copy_(src);
        loom::sync(g_dev);
      },
      2.0 * 4 * n);
}

void w1(const std::string& peer) {
  const int64_t n = int64_t{1} << 24;
  loom::Tensor x = input({n});
  bandwidth_rows(
      "W1 pointwise-chain 16M f32", peer,
      [&] {
        loom::Tensor y = loom::sigmoid(loom::tanh(x * 1.5 + 0.5) * x) + x * x;
        loom::sync(g_dev);
      },
      2.0 * 4 * n);
}

void w2(const std::string& peer) {
  loom::Tensor x = input({8192, 4096});
  bandwidth_rows(
      "W2 softmax 8192x4096 f32", peer,
      [&] {
        loom::Tensor y = loom::softmax(x, -1);
        loom::sync(g_dev);
      },
      2.0 * 4 * x.numel());
}

void w3(const std::string& peer) {
  loom::Tensor x = input({8192, 4096});
  loom::Tensor g = input({4096});
  loom::Tensor b = input({4096});
  bandwidth_rows(
      "W3 layernorm 8192x4096 f32", peer,
      [&] {
        // Composed exactly as peers.py's w3: mean, biased variance, affine.
        loom::Tensor mu = x.mean({-1}, /*keepdim=*/true);
        loom::Tensor var = (x - mu).pow(2).mean({-1}, /*keepdim=*/true);
        loom::Tensor y = (x - mu) * loom::rsqrt(var + 1e-5) * g + b;
        loom::sync(g_dev);
      },
      2.0 * 4 * x.numel());
}

// W5's step: a two-layer tanh policy, then ten clamped state updates.
loom::Tensor w5_step(const loom::Tensor& s0, const loom::Tensor& W1, const loom::Tensor& W2) {
  loom::Tensor a = loom::tanh(loom::tanh(s0.matmul(W1)).matmul(W2));
  loom::Tensor s = s0;
  for (int i = 0; i < 10; ++i) s = loom::clamp(s * 0.99 + a * 0.01, -1.0, 1.0);
  return s;
}

void w5(const std::string& peer) {
  loom::Tensor W1 = input({64, 64}, 0.1);
  loom::Tensor W2 = input({64, 64}, 0.1);
  loom::Tensor s0 = input({1, 64});
  Repeats r;
  r.warmup = 20;
  r.min_reps = 50;
  r.min_s = 0.5;
  double t = median_time(
      [&] {
        loom::Tensor s = w5_step(s0, W1, W2);
        finish();
      },
      r);
  row_ms("W5 control-step 64", peer, t, "us", t * 1e6);
  // The same step as a loom::compile'd function (as torch.compile's rows):
  // traced on the first call, then replayed without recording.
  loom::CompiledFunction step =
      loom::compile([&](const std::vector<loom::Tensor>& in) { return std::vector<loom::Tensor>{w5_step(in[0], W1, W2)}; });
  const double tc = median_time(
      [&] {
        loom::Tensor s = step({s0})[0];
        finish();
      },
      r);
  row_ms("W5 control-step 64", peer + "-compiled", tc, "us", tc * 1e6);
}

// ---------------------------------------------------------------- W6, G1: matrix products

// The threads loom's kernels run on (TBB's default: the CPUs this process
// may use); OpenBLAS is given as many.
int cpu_threads() {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

#ifdef LOOM_BENCH_OPENBLAS
const char* kBlasPeer = "openblas";
void blas_threads() { openblas_set_num_threads(cpu_threads()); }
#endif

// ---------------------------------------------------------------- F0: the FMA ceiling

// F0: the float32 rate this machine's cores can reach at all, the compute
// counterpart of W0: every CPU this process may use runs kChains
// independent FMA chains on the widest vectors it has (no loads, no
// stores: nothing but the FMA pipes), and the row counts 2 FLOP per lane
// per FMA. W4's and W6's GFLOP/s are read against it in the same run.
// Twelve chains cover the FMA latency times the pipes of current x86 cores
// (Zen 4: 4 cycles x 2 pipes; Skylake-X: 4 x 2).
constexpr int kChains = 12;

// One function per instruction set: intrinsics only inline into a function
// compiled for their target. (GCC 12 warns inside its own
// _mm512_reduce_add_ps, whose _mm512_undefined_ps is uninitialized by
// design.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
__attribute__((target("avx512f"))) double fma_avx512(int64_t iters) {
  __m512 acc[kChains];
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (__m512& a : acc) a = _mm512_set1_ps(1.0f);
  for (int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (__m512& a : acc) a = _mm512_fmadd_ps(a, m, c);
  double s = 0;
  for (__m512 a : acc) s += _mm512_reduce_add_ps(a);
  return s;  // returned so that the chains are not dead code
}
#pragma GCC diagnostic pop

__attribute__((target("avx2,fma"))) double fma_avx2(int64_t iters) {
  __m256 acc[kChains];
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (__m256& a : acc) a = _mm256_set1_ps(1.0f);
  for (int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (__m256& a : acc) a = _mm256_fmadd_ps(a, m, c);
  alignas(32) float v[8];
  double s = 0;
  for (__m256 a : acc) {
    _mm256_store_ps(v, a);
    for (float x : v) s += x;
  }
  return s;
}

void f0(const std::string&) {
  const char* name = "F0 fma-peak f32";
  if (!g_dev.is_cpu()) {
    row_error(name, "loom", "cpu only (a GPU's limit is the best rate a peer reaches: W6)");
    return;
  }
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    row_error(name, "loom", "this CPU has neither AVX-512 nor AVX2 with FMA");
    return;
  }
  const int lanes = avx512 ? 16 : 8, threads = cpu_threads();
  const int64_t iters = 20'000'000;  // 66 ms a run on the 2-vCPU Zen 4 (AVX-512)
  const double flop = 2.0 * lanes * kChains * static_cast<double>(iters) * threads;
  Repeats r;
  r.warmup = 1;
  r.min_reps = 5;
  r.min_s = 1.0;
  std::vector<double> sink(threads);
  const double t = median_time(
      [&] {
        std::vector<std::thread> pool;
        for (int i = 0; i < threads; ++i)
          pool.emplace_back([&, i] { sink[i] = avx512 ? fma_avx512(iters) : fma_avx2(iters); });
        for (std::thread& th : pool) th.join();
      },
      r);
  row_ms(name, std::string(avx512 ? "avx512" : "avx2") + " x" + std::to_string(threads), t, "GFLOP/s", flop / t / 1e9);
}

// A product of two matrices the size of W6: seconds enough per call.
Repeats gemm_repeats() {
  Repeats r;
  r.warmup = 1;
  r.min_reps = 5;
  r.min_s = 2.0;
  return r;
}

void w6(const std::string& peer) {
  const int64_t n = 4096;
  const double flop = 2.0 * n * n * n;
  loom::Tensor a = input({n, n}), b = input({n, n});
  auto product_row = [&](const char* name, const loom::Tensor& x, const loom::Tensor& y) -> double {
    double t = median_time(
        [&] {
          loom::Tensor c = loom::matmul(x, y);
          finish();
        },
        gemm_repeats());
    row_ms(name, peer, t, "GFLOP/s", flop / t / 1e9);
    return t;
  };
  const double t = product_row("W6 matmul 4096 f32", a, b);
  if (g_dev.is_cuda()) {
    // The same product with TF32 tensor cores, which a user opts into as
    // with PyTorch's allow_tf32; then bfloat16 operands on the tensor cores,
    // float32 sums, a bfloat16 result (linear_peer.py prints torch's rows).
    loom::cuda::set_allow_tf32(true);
    product_row("W6 matmul 4096 tf32", a, b);
    loom::cuda::set_allow_tf32(false);
    loom::Tensor ah = a.to(loom::kBFloat16), bh = b.to(loom::kBFloat16);
    finish();
    product_row("W6 matmul 4096 bf16", ah, bh);
  }
  if (!g_dev.is_cpu()) return;
#ifdef LOOM_BENCH_OPENBLAS
  blas_threads();
  loom::Tensor c = loom::empty({n, n});
  float* pc = c.data_ptr<float>();
  const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
  double tb = median_time([&] { cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, pa, n, pb, n, 0.0f, pc, n); },
                          gemm_repeats());
  row_ms("W6 matmul 4096 f32", kBlasPeer, tb, "GFLOP/s", flop / tb / 1e9);
  row_value("W6 loom/openblas", "pct", 100.0 * tb / t);
#else
  row_error("W6 matmul 4096 f32", "openblas", "not built: CMake found no OpenBLAS (libopenblas-dev)");
#endif
}

// L1: a Linear layer at batch 1 with its ReLU, relu(x W^T + b), x [1, n]:
// a policy network's layer in a control loop. loom's own rows (peers.py
// has none): torch's F.linear timed beside it is in docs/PERFORMANCE.md.
void l1(const std::string& peer) {
  for (int64_t n : {256, 1024}) {
    loom::Tensor x = input({1, n});
    loom::Tensor w = input({n, n}, 0.1);
    loom::Tensor b = input({n});
    Repeats r;
    r.warmup = 20;
    r.min_reps = 50;
    r.min_s = 0.3;
    const double t = median_time(
        [&] {
          loom::Tensor y = loom::relu(loom::linear(x, w, b));
          finish();
        },
        r);
    row_ms("L1 linear-relu batch1 " + std::to_string(n), peer, t, "us", t * 1e6);
  }
}

// G1: Linear + bias + GELU, y = gelu(x W^T + b), x and W [4096, 4096]. loom
// computes it as one GEMM kernel with the bias and GELU in its store;
// the vendor way is sgemm, then a separate pass over y (timed on its own
// too: loom's own pointwise kernel for gelu(y + b)).
void g1(const std::string& peer) {
  const int64_t n = 4096;
  const double flop = 2.0 * n * n * n;
  loom::Tensor x = input({n, n}), w = input({n, n}, 1.0 / 64), bias = input({n});
  double t = median_time(
      [&] {
        loom::Tensor y = loom::gelu(loom::linear(x, w, bias));
        finish();
      },
      gemm_repeats());
  row_ms("G1 linear-gelu 4096 f32", peer, t, "GFLOP/s", flop / t / 1e9);
  loom::Tensor c = input({n, n});
  double te = median_time(
      [&] {
        loom::Tensor y = loom::gelu(c + bias);
        finish();
      },
      big_repeats());
  row_ms("G1 epilogue-pass 4096 f32", peer, te, "GB/s", 2.0 * 4 * n * n / te / 1e9);
  if (g_dev.is_cuda()) {
    // x W^T with TF32 allowed: both operands contiguous along K, the layout
    // the warpgroup tensor cores take TF32 in (linear_peer.py: torch's row).
    loom::cuda::set_allow_tf32(true);
    double tt = median_time(
        [&] {
          loom::Tensor y = loom::linear(x, w);
          finish();
        },
        gemm_repeats());
    loom::cuda::set_allow_tf32(false);
    row_ms("G0 linear-nobias 4096 tf32", peer, tt, "GFLOP/s", flop / tt / 1e9);
  }
  if (!g_dev.is_cpu()) return;
#ifdef LOOM_BENCH_OPENBLAS
  blas_threads();
  float* pc = c.data_ptr<float>();
  const float *px = x.data_ptr<float>(), *pw = w.data_ptr<float>();
  double tb = median_time(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, px, n, pw, n, 0.0f, pc, n);
        loom::Tensor y = loom::gelu(c + bias);
        finish();
      },
      gemm_repeats());
  row_ms("G1 linear-gelu 4096 f32", std::string(kBlasPeer) + "+epi", tb, "GFLOP/s", flop / tb / 1e9);
  // OpenBLAS's threads spin for a while after each call, so the pass right
  // after it runs beside them: the vendor way is also taken as sgemm alone
  // plus the pass alone (te), and the margin is against the faster of the
  // two, so that this interference never counts in loom's favour.
  const double tg = median_time(
      [&] { cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, px, n, pw, n, 0.0f, pc, n); },
      gemm_repeats());
  row_ms("G1 linear-nobias 4096 f32", kBlasPeer, tg, "GFLOP/s", flop / tg / 1e9);
  row_value("G1 (openblas+epi)-loom", "ms", (std::min(tb, tg + te) - t) * 1e3);
#else
  row_error("G1 linear-gelu 4096 f32", "openblas+epi", "not built: CMake found no OpenBLAS (libopenblas-dev)");
#endif
}

// ---------------------------------------------------------------- W7, W8, W10: real models
// WORKLOADS.md's GPU size on --device cuda (bfloat16 autocast), its CPU size
// (float32) on the CPU; the models are samples/gpt2_model.h and
// samples/resnet18_model.h, the steps their train_step functions.

// A model step runs for milliseconds to seconds: a few repeats suffice.
Repeats model_repeats() {
  Repeats r;
  r.warmup = 3;
  r.min_reps = 5;
  r.min_s = 1.0;
  r.max_reps = 50;
  return r;
}

// The process's peak of GPU memory held by tensors, beside
// torch.cuda.max_memory_allocated (bench/peer_extras.py).
void peak_memory_row(const std::string& workload) {
  if (!g_dev.is_cuda()) return;
  row_value(workload + " peak-memory", "MiB",
            static_cast<double>(loom::cuda::memory_stats(g_dev.index()).peak_allocated_bytes) / (1 << 20));
}

void w7(const std::string& peer) {
  const bool big = g_dev.is_cuda();
  const gpt2::Config cfg = big ? gpt2::Config::gpu() : gpt2::Config::cpu();
  const int64_t batch = big ? 8 : 4;
  loom::manual_seed(0);
  gpt2::GPT model(cfg);
  model->to(g_dev);
  loom::optim::AdamW opt(model->parameters(), loom::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).weight_decay(0.1));
  const loom::Tensor idx = loom::randint(0, cfg.vocab, {batch, cfg.block + 1}, loom::TensorOptions(loom::kLong).device(g_dev));
  finish();
  const std::string name = big ? "W7 gpt2-train-step" : "W7 gpt-small-train-step";
  const double t = median_time(
      [&] {
        gpt2::train_step(model, opt, idx, big);
        finish();
      },
      model_repeats());
  row_ms(name, peer, t, "tok/s", static_cast<double>(batch * cfg.block) / t);
  peak_memory_row("W7");
}

// W7's loss after 20 steps on one fixed batch, mixed precision against
// float32 (the acceptance's 2%): printed, not timed.
void w7_loss(const std::string&) {
  const bool big = g_dev.is_cuda();
  const gpt2::Config cfg = big ? gpt2::Config::gpu() : gpt2::Config::cpu();
  const int64_t batch = big ? 8 : 4;
  double loss[2] = {0, 0};
  for (int amp = 0; amp < 2; ++amp) {
    loom::manual_seed(0);
    gpt2::GPT model(cfg);
    model->to(g_dev);
    loom::optim::AdamW opt(model->parameters(), loom::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).weight_decay(0.1));
    const loom::Tensor idx =
        loom::randint(0, cfg.vocab, {batch, cfg.block + 1}, loom::TensorOptions(loom::kLong).device(g_dev));
    for (int step = 0; step < 20; ++step) loss[amp] = gpt2::train_step(model, opt, idx, amp == 1).item<double>();
  }
  row_value("W7L loss-after-20 f32", "loss", loss[0]);
  row_value("W7L loss-after-20 bf16-amp", "loss", loss[1]);
  row_value("W7L amp/f32 difference", "pct", 100.0 * (loss[1] - loss[0]) / loss[0]);
}

void w8(const std::string& peer) {
  const bool big = g_dev.is_cuda();
  const int64_t B = big ? 8 : 2, H = big ? 12 : 4, T = big ? 1024 : 256, D = big ? 64 : 32;
  const double flop = 3.5 * 2 * 2 * static_cast<double>(B * H) * T * T * D / 2;
  // The median time of attend(q, k, v).backward(go), the gradients cleared each call.
  auto time_step = [&](loom::ScalarType dt, const std::function<loom::Tensor(const loom::Tensor&, const loom::Tensor&,
                                                                             const loom::Tensor&)>& attend) {
    auto make = [&] { return input({B, H, T, D}).to(dt).detach().requires_grad_(); };
    loom::Tensor q = make(), k = make(), v = make();
    const loom::Tensor go = input({B, H, T, D}).to(dt);
    finish();
    return median_time(
        [&] {
          for (loom::Tensor* t : {&q, &k, &v}) t->mutable_grad() = loom::Tensor();
          attend(q, k, v).backward(go);
          finish();
        },
        model_repeats());
  };
  const loom::ScalarType dt = big ? loom::kBFloat16 : loom::kFloat;
  const double t = time_step(dt, [](const loom::Tensor& q, const loom::Tensor& k, const loom::Tensor& v) {
    return loom::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  });
  row_ms("W8 causal-attention-fwd-bwd", peer, t, "GFLOP/s", flop / t / 1e9);
  // The same causal mask as a FlexAttention mask_mod: a bool [T, T] tensor
  // beside the code, which the kernels read to find the tiles to skip.
  namespace A = loom::nn::attention;
  auto causal = [](const loom::Tensor&, const loom::Tensor&, const loom::Tensor& qi, const loom::Tensor& kj) {
    return kj.le(qi);
  };
  const double tm = time_step(dt, [&](const loom::Tensor& q, const loom::Tensor& k, const loom::Tensor& v) {
    return A::flex_attention(q, k, v, A::create_block_mask(causal, std::nullopt, std::nullopt, T, T, g_dev));
  });
  row_ms("W8m causal-as-mask-tensor", "loom", tm, "GFLOP/s", flop / tm / 1e9);
  if (!big) return;
  const double th = time_step(loom::kHalf, [](const loom::Tensor& q, const loom::Tensor& k, const loom::Tensor& v) {
    return loom::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  });
  row_ms("W8h causal f16", "loom", th, "GFLOP/s", flop / th / 1e9);
}

// W9: the W7 model in inference (no grad, eval; bfloat16 autocast on the
// GPU), batch 1, 32 calls at the lengths WORKLOADS.md draws with Python's
// random.Random(9).randint(16, T), each call's logits computed (synced),
// timed from the first call with every compile in it. Run it in a process
// of its own with an empty LOOM_CACHE_DIR for the cold start the workload
// asks (bench/w9.sh). Lengths, from
//   python3 -c "import random; r=random.Random(9); print([r.randint(16, T) for _ in range(32)])"
void w9(const std::string& peer) {
  const bool big = g_dev.is_cuda();
  static const std::vector<int64_t> kLensCpu = {75, 94, 63, 50, 33, 39, 126, 102, 16, 59, 80, 75, 93, 26, 58, 86,
                                                94, 105, 21, 109, 64, 37, 106, 73, 108, 70, 36, 37, 46, 22, 30, 32};
  static const std::vector<int64_t> kLensGpu = {490, 643, 398, 289, 157, 206, 903, 708, 22, 362, 530,
                                                490, 935, 635, 98,  358, 583, 974, 647, 732, 57,  761,
                                                404, 189, 736, 984, 478, 990, 758, 448, 176, 188};
  const gpt2::Config cfg = big ? gpt2::Config::gpu() : gpt2::Config::cpu();
  const std::vector<int64_t>& lens = big ? kLensGpu : kLensCpu;
  loom::manual_seed(0);
  gpt2::GPT model(cfg);
  model->to(g_dev);
  model->eval();
  std::vector<loom::Tensor> toks;
  for (int64_t n : lens) toks.push_back(loom::randint(0, cfg.vocab, {1, n}, loom::TensorOptions(loom::kLong).device(g_dev)));
  finish();
  const loom::Metrics before = loom::metrics();
  const auto t0 = std::chrono::steady_clock::now();
  {
    loom::NoGradGuard no_grad;
    loom::autocast::AutocastMode amp(g_dev.type(), loom::kBFloat16, big);
    for (const loom::Tensor& t : toks) {
      loom::Tensor logits = model->forward(t);
      finish();
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const loom::Metrics after = loom::metrics();
  row_ms("W9 varlen-infer-32-calls", peer, s);
  // Graphs compiled (one per new length), those of them that generated
  // code (LLVM or NVRTC: the model's compiles), the rest resized.
  const int64_t graphs = after.cache_misses - before.cache_misses;
  const int64_t resized = after.executables_resized - before.executables_resized;
  row_value("W9 graphs compiled", "n", static_cast<double>(graphs));
  row_value("W9 graphs that compiled code", "n", static_cast<double>(graphs - resized));
  row_value("W9 resized, no code", "n", static_cast<double>(resized));
  row_value("W9 compile time", "ms", static_cast<double>(after.compile_ns - before.compile_ns) / 1e6);
}

void w10(const std::string& peer) {
  const bool big = g_dev.is_cuda();
  const int64_t batch = big ? 128 : 8;
  loom::manual_seed(0);
  resnet18::ResNet18 model(64);
  model->to(g_dev);
  loom::optim::SGD opt(model->parameters(), loom::optim::SGDOptions(0.1).momentum(0.9).weight_decay(5e-4));
  const loom::Tensor x = input({batch, 3, 32, 32});
  const loom::Tensor y = loom::randint(0, 10, {batch}, loom::TensorOptions(loom::kLong).device(g_dev));
  finish();
  const double t = median_time(
      [&] {
        resnet18::train_step(model, opt, x, y, big);
        finish();
      },
      model_repeats());
  row_ms("W10 resnet18-train-step", peer, t, "img/s", static_cast<double>(batch) / t);
  peak_memory_row("W10");
}

// ---------------------------------------------------------------- W4, C1, C2: a training step

namespace F = loom::nn::functional;

// W4's model, data and optimizer, made and materialized (the optimizer's
// constructor syncs): what is left to time is the step itself.
struct W4 {
  static constexpr int64_t kBatch = 256;
  loom::nn::Sequential model{nullptr};
  loom::Tensor x, y;
  std::unique_ptr<loom::optim::SGD> opt;
  W4() {
    loom::manual_seed(0);
    model = loom::nn::Sequential(loom::nn::Linear(784, 1024), loom::nn::ReLU(), loom::nn::Linear(1024, 1024),
                                 loom::nn::ReLU(), loom::nn::Linear(1024, 10));
    if (!g_dev.is_cpu()) model->to(g_dev);
    x = loom::randn({kBatch, 784}, loom::TensorOptions().device(g_dev));
    y = loom::randint(0, 10, {kBatch}, loom::TensorOptions(loom::kLong).device(g_dev));
    opt = std::make_unique<loom::optim::SGD>(model->parameters(), loom::optim::SGDOptions(0.01).momentum(0.9));
  }
  // As peers.py's step: zero_grad, forward, cross-entropy, backward, step
  // (which syncs: the whole step is one graph).
  void step(bool set_to_none = true) {
    opt->zero_grad(set_to_none);
    loom::Tensor loss = F::cross_entropy(model->forward(x), y);
    loss.backward();
    opt->step();
  }
  static double flops() { return 3.0 * 2 * kBatch * (784 * 1024 + 1024 * 1024 + 1024 * 10); }
};

// W4's whole plain step (the same modules, loss, optimizer and ops) on a
// tiny model, 784-16-16-10 at batch 8, whose kernels take microseconds: the
// host's work per step when no large product runs between steps. Timed
// back to back, then with 4 ms of idle spinning (no memory touched) before
// each step: on the 2-vCPU VM this tells what elapsed time alone, one timer
// tick (HZ=250) or more, does to the host's next step.
void w4_tiny_host() {
  loom::manual_seed(0);
  loom::nn::Sequential model(loom::nn::Linear(784, 16), loom::nn::ReLU(), loom::nn::Linear(16, 16), loom::nn::ReLU(),
                             loom::nn::Linear(16, 10));
  const loom::Tensor x = loom::randn({8, 784});
  const loom::Tensor y = loom::randint(0, 10, {8}, loom::TensorOptions(loom::kLong));
  loom::optim::SGD opt(model->parameters(), loom::optim::SGDOptions(0.01).momentum(0.9));
  auto host_us = [&](int steps, double idle_us) {
    std::vector<double> host;
    for (int i = 0; i < steps; ++i) {
      const auto s0 = Clock::now();
      while (seconds_since(s0) * 1e6 < idle_us) {
      }
      const int64_t exec0 = loom::metrics().execute_ns;
      const auto t0 = Clock::now();
      opt.zero_grad();
      {
        loom::Tensor loss = F::cross_entropy(model->forward(x), y);
        loss.backward();
        opt.step();
      }
      const double wall_us = seconds_since(t0) * 1e6;
      if (i >= 3) host.push_back(wall_us - (loom::metrics().execute_ns - exec0) / 1e3);  // the first compiled
    }
    return median(host);
  };
  row_value("W4 host tiny-model step", "us", host_us(200, 0));
  row_value("W4 host tiny-model step after 4 ms idle", "us", host_us(100, 4000));
}

void w4(const std::string& peer) {
  W4 w;
  Repeats r;
  r.warmup = 2;
  r.min_reps = 10;
  r.min_s = 1.0;
  // Host time per step: wall time minus the time inside Executable::run.
  std::vector<double> host_us, step_us;
  // Each step waits for its results, as peers.py times a step (on a GPU,
  // loom's step() itself returns before the GPU is done: the pipelined row
  // below).
  double t = median_time(
      [&] {
        const int64_t exec0 = loom::metrics().execute_ns;
        const auto t0 = Clock::now();
        w.step();
        // The clock first: metrics() copies and sorts its compile times
        // under a lock, work that is not the step's.
        const double wall_us = seconds_since(t0) * 1e6;
        host_us.push_back(wall_us - (loom::metrics().execute_ns - exec0) / 1e3);
        finish();
        step_us.push_back(seconds_since(t0) * 1e6);
      },
      r);
  row_ms("W4 mlp-train-step b256", peer, t, "GFLOP/s", W4::flops() / t / 1e9);
  host_us.erase(host_us.begin(), host_us.begin() + r.warmup);  // the first step compiled
  row_value("W4 host-per-step", "us", median(host_us));
  row_value("W4 host-share", "pct", 100.0 * median(host_us) / (t * 1e6));
  // Where the host time goes: the same step again, timed by phase (medians
  // of 20 steps). zero_grad; forward and loss (recording); backward
  // (recording); optimizer step minus the time inside Executable::run
  // (recording the update, the sync's graph build, hash, lookup, binding,
  // results and the release of the graph); dropping the loss (the rest of
  // the autograd graph).
  std::vector<double> ph[5];
  for (int i = 0; i < 20; ++i) {
    // Outside the clocks: metrics() is work of its own (a lock, a sort).
    // Only step() runs kernels; the rest of a plain step records.
    const int64_t exec0 = loom::metrics().execute_ns;
    const auto t0 = Clock::now();
    w.opt->zero_grad();
    const auto t1 = Clock::now();
    Clock::time_point t2, t3, t4;
    {
      loom::Tensor loss = F::cross_entropy(w.model->forward(w.x), w.y);
      t2 = Clock::now();
      loss.backward();
      t3 = Clock::now();
      w.opt->step();
      t4 = Clock::now();
    }
    const auto t5 = Clock::now();
    const int64_t exec_ns = loom::metrics().execute_ns - exec0;
    auto us = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
    ph[0].push_back(us(t0, t1));
    ph[1].push_back(us(t1, t2));
    ph[2].push_back(us(t2, t3));
    ph[3].push_back(us(t3, t4) - exec_ns / 1e3);
    ph[4].push_back(us(t4, t5));
  }
  // A loop that does not wait after each step (a training loop that reads
  // its loss now and then): on a GPU the host records step n+1 while the
  // GPU runs step n. Steps per second over 10-step runs.
  if (g_dev.is_cuda()) {
    constexpr int kRun = 10;
    const double tp = median_time(
        [&] {
          for (int i = 0; i < kRun; ++i) w.step();
          finish();
        },
        r);
    row_ms("W4 mlp-train-step b256", peer + "-pipelined", tp / kRun, "GFLOP/s", W4::flops() / (tp / kRun) / 1e9);
  }
  row_value("W4 host zero_grad", "us", median(ph[0]));
  row_value("W4 host forward+loss", "us", median(ph[1]));
  row_value("W4 host backward", "us", median(ph[2]));
  row_value("W4 host step-outside-run", "us", median(ph[3]));
  row_value("W4 host release", "us", median(ph[4]));
  // The same forward and backward recording, each preceded (outside the
  // clock) by the recording of a tiny model's forward, loss and backward:
  // other tensors and modules, the same ops. What this row saves against
  // the two above is what the previous step's products evicted of the
  // recording path's code and shared state (not of W4's own tensors).
  if (g_dev.is_cpu()) {
    loom::nn::Sequential tiny(loom::nn::Linear(8, 8), loom::nn::ReLU(), loom::nn::Linear(8, 8), loom::nn::ReLU(),
                              loom::nn::Linear(8, 4));
    const loom::Tensor tx = loom::randn({2, 8});
    const loom::Tensor ty = loom::randint(0, 4, {2}, loom::TensorOptions(loom::kLong));
    finish();
    std::vector<double> warmed;
    for (int i = 0; i < 20; ++i) {
      w.opt->zero_grad();
      {
        loom::Tensor l = F::cross_entropy(tiny->forward(tx), ty);
        l.backward();
      }
      const auto t0 = Clock::now();
      loom::Tensor loss = F::cross_entropy(w.model->forward(w.x), w.y);
      loss.backward();
      warmed.push_back(seconds_since(t0) * 1e6);
      tiny->zero_grad();
      w.opt->step();
    }
    row_value("W4 host fwd+bwd warmed", "us", median(warmed));
    w4_tiny_host();
  }

  // The same step as a loom::compile'd function: one plain step first (it
  // creates the gradients and the momentum buffers, which later steps
  // update in place: zero_grad(set_to_none=false)), then each call replays
  // the step's executable without recording.
  W4 wc;
  wc.step(false);
  loom::CompiledFunction step = loom::compile([&](const std::vector<loom::Tensor>&) {
    wc.step(false);
    return std::vector<loom::Tensor>{};
  });
  std::vector<double> host_c;
  const double tc = median_time(
      [&] {
        const int64_t exec0 = loom::metrics().execute_ns;
        const auto t0 = Clock::now();
        step({});
        finish();
        const double wall_us = seconds_since(t0) * 1e6;  // before metrics(), as above
        host_c.push_back(wall_us - (loom::metrics().execute_ns - exec0) / 1e3);
      },
      r);
  host_c.erase(host_c.begin(), host_c.begin() + r.warmup);
  row_ms("W4 mlp-train-step b256", peer + "-compiled", tc, "GFLOP/s", W4::flops() / tc / 1e9);
  row_value("W4 host-per-step compiled", "us", median(host_c));
}

// C1 / C2: the first W4 step of a new process (this binary, run again with
// --first-step), whose LOOM_CACHE_DIR is empty (C1) or was filled by such
// a run (C2). The child makes the model and data first (and compiles their
// small init graph, outside the clock), then times one step.
std::string g_self;  // this executable

int first_step_child() {
  W4 w;
  const loom::Metrics m0 = loom::metrics();
  const auto t0 = Clock::now();
  w.step();
  const double ms = seconds_since(t0) * 1e3;
  const loom::Metrics m1 = loom::metrics();
  // The split: time inside Executable::run (the step's kernels, first run),
  // time in Backend::compile (lowering, disk-cache read, LLVM if it missed,
  // link), and the rest (recording, graph build, hash, results).
  std::printf("first_step_ms=%.3f run_ms=%.3f compile_ms=%.3f jit_compiles=%lld\n", ms,
              (m1.execute_ns - m0.execute_ns) / 1e6, (m1.compile_ns - m0.compile_ns) / 1e6,
              static_cast<long long>(m1.jit_compiles - m0.jit_compiles));
  return 0;
}

struct FirstStepSplit {
  double run_ms = -1, compile_ms = -1;
};

double first_step_in_new_process(const std::string& cache_dir, const std::string& backend,
                                 FirstStepSplit* split = nullptr) {
  // The child never calls OpenBLAS: no worker threads of it beside the step.
  const std::string cmd =
      "OPENBLAS_NUM_THREADS=1 LOOM_CACHE_DIR='" + cache_dir + "' '" + g_self + "' --first-step --backend " + backend;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw loom::Error("cannot start " + g_self);
  char line[256];
  double ms = -1, run_ms = -1, compile_ms = -1;
  while (std::fgets(line, sizeof line, p))
    if (std::sscanf(line, "first_step_ms=%lf run_ms=%lf compile_ms=%lf", &ms, &run_ms, &compile_ms) >= 1) break;
  if (pclose(p) != 0 || ms < 0) throw loom::Error("the first-step child process failed: " + cmd);
  if (split) *split = {run_ms, compile_ms};
  return ms;
}

std::string g_cache_dir;  // one fresh folder per loom-bench run, shared by C1 and C2

void c_rows(const std::string& peer, bool warm) {
  const std::string backend = peer.substr(5);
  if (g_cache_dir.empty()) {
    char tmpl[] = "/tmp/loom-bench-cache-XXXXXX";
    if (!mkdtemp(tmpl)) throw loom::Error("cannot make a temporary cache folder");
    g_cache_dir = tmpl;
  }
  if (warm) first_step_in_new_process(g_cache_dir, backend);  // make sure it is filled
  else std::system(("rm -rf '" + g_cache_dir + "' && mkdir -p '" + g_cache_dir + "'").c_str());
  FirstStepSplit split;
  const double ms = first_step_in_new_process(g_cache_dir, backend, &split);
  row_ms(warm ? "C2 first-step-warm-cache" : "C1 first-step-cold-cache", peer, ms / 1e3);
  // The same step split: inside Executable::run (its kernels) and outside.
  const char* id = warm ? "C2" : "C1";
  row_value(std::string(id) + " in-run", "ms", split.run_ms);
  row_value(std::string(id) + " outside-run", "ms", ms - split.run_ms);
  row_value(std::string(id) + " compile", "ms", split.compile_ms);
}

// ---------------------------------------------------------------- O rows

constexpr int kChain = 1000;

// O1: records `y = y + x` kChain times on a [16] float32 tensor, no sync.
void o1() {
  loom::Tensor x = input({16});
  std::vector<double> ns_per_op;
  for (int rep = 0; rep < 520; ++rep) {
    loom::Tensor y = x;
    auto t0 = Clock::now();
    for (int i = 0; i < kChain; ++i) y = y + x;
    double s = seconds_since(t0);
    loom::sync(g_dev);  // untimed: keeps the pending list and the graph-size cut out of the next repeat
    if (rep >= 20) ns_per_op.push_back(s * 1e9 / kChain);
  }
  row_value("O1 record-per-op", "ns", median(ns_per_op));
}

// O2: builds the canonical form and XXH3 key of O1's pending graph (as a
// sync does before its cache lookup), through loom::testing::graph_key.
void o2() {
  loom::Tensor x = input({16});
  loom::Tensor y = x;
  for (int i = 0; i < kChain; ++i) y = y + x;
  size_t nodes = 0;
  uint64_t key = loom::testing::graph_key(y, &nodes);
  std::vector<double> ns_per_node;
  for (int rep = 0; rep < 1020; ++rep) {
    auto t0 = Clock::now();
    uint64_t k = loom::testing::graph_key(y, &nodes);
    double s = seconds_since(t0);
    if (k != key) std::fprintf(stderr, "loom-bench: O2: graph key changed between builds\n");
    if (rep >= 20) ns_per_node.push_back(s * 1e9 / static_cast<double>(nodes));
  }
  row_value("O2 hash-per-node", "ns", median(ns_per_node));
  loom::sync(g_dev);
}

// O3: sync() of O1's graph on a cache hit, minus the time the executor
// spent inside Executable::run (metrics().execute_ns): the lazy runtime's
// own cost per sync (graph build, hash, lookup, binding, result hand-off).
void o3() {
  loom::Tensor x = input({16});
  std::vector<double> us;
  for (int rep = 0; rep < 320; ++rep) {
    loom::Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = y + x;
    int64_t exec0 = loom::metrics().execute_ns;
    auto t0 = Clock::now();
    loom::sync(g_dev);
    double s = seconds_since(t0);
    int64_t exec_ns = loom::metrics().execute_ns - exec0;
    if (rep >= 20) us.push_back(s * 1e6 - exec_ns / 1e3);  // the first repeats include the compile (miss)
  }
  row_value("O3 sync-overhead-hit", "us", median(us));
}

// ---------------------------------------------------------------- driver

struct Workload {
  std::string id;
  std::string name;  // the row's workload column, for error rows
  std::function<void(const std::string& peer)> run;  // empty: not implemented yet
};

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "loom-bench: %s\n", msg.c_str());
  std::fprintf(stderr, "usage: loom-bench [--only ID,ID,...] [--device cpu|cuda] [--backend reference|llvm|cuda] [--json FILE]\n");
  return 2;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string only, device = "cpu", backend, json;
  bool print_metrics = false;
  bool first_step = false;
  bool sizes_as_args = false;
  {
    char path[4096];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    g_self = n > 0 ? std::string(path, static_cast<size_t>(n)) : argv[0];
  }
#ifdef LOOM_BENCH_OPENBLAS
  // OpenBLAS starts its worker threads when the library loads, and they spin
  // ~0.1 s before they sleep: beside whatever loom times first. C1 and C2
  // time their whole step in that window (their child is this binary): on
  // the 2-vCPU Zen 3, C2 58.6-62.6 ms in three of four processes with the
  // spinning worker (35.9 in the fourth), 33.2-45.6 without. So the
  // process starts OpenBLAS with one thread (set before the library loads,
  // hence the re-exec), and W6 and G1 raise it (blas_threads()); a user's
  // own OPENBLAS_NUM_THREADS is left alone.
  if (!std::getenv("OPENBLAS_NUM_THREADS") && setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0)
    execv(g_self.c_str(), argv);  // returns only on failure: then run as we are
#endif
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const std::string& flag) -> const char* {
      if (a.rfind(flag + "=", 0) == 0) return argv[i] + flag.size() + 1;
      if (a == flag && i + 1 < argc) return argv[++i];
      return nullptr;
    };
    if (a == "-h" || a == "--help") {
      std::printf("usage: loom-bench [--only ID,ID,...] [--device cpu|cuda] [--backend reference|llvm|cuda] [--sizes-as-args] [--metrics] [--json FILE]\n"
                  "workloads: F0 W0 W1 W2 W3 W4 W5 W6 W7 W7L W8 W9 W10 G1 L1 O1 O2 O3 C1 C2 (see bench/README.md)\n");
      return 0;
    } else if (a == "--metrics") {
      print_metrics = true;
    } else if (a == "--sizes-as-args") {
      sizes_as_args = true;  // every compile takes sizes as arguments: the rows beside the static ones
    } else if (a == "--first-step") {
      first_step = true;  // internal: the child process of C1 / C2
    } else if (const char* v = value("--only")) {
      only = v;
    } else if (const char* v = value("--device")) {
      device = v;
    } else if (const char* v = value("--backend")) {
      backend = v;
    } else if (const char* v = value("--json")) {
      json = v;
    } else {
      return usage_error("unknown argument '" + a + "'");
    }
  }
  if (device != "cpu" && device != "cuda") return usage_error("unknown device '" + device + "' (expected cpu or cuda)");
  if (backend.empty()) backend = device == "cuda" ? "cuda" : loom::backend_name(loom::kCPU);
  if (backend != "reference" && backend != "llvm" && backend != "cuda")
    return usage_error("unknown backend '" + backend + "' (expected reference, llvm or cuda)");
  g_device = device;
  // With --sizes-as-args the peer is named "loom-llvm-sizes-args": its rows
  // sit beside the static build's in one table (bench/sizes_as_args.sh).
  const std::string peer = "loom-" + backend + (sizes_as_args ? "-sizes-args" : "");
  if (sizes_as_args) loom::set_dynamic_shapes(loom::DynamicShapes::Always);
  if (first_step) {
    if (device == "cuda") g_dev = loom::Device(loom::kCUDA, 0);
    else loom::set_backend(backend);
    return first_step_child();
  }

  // The O rows run first, while the process's allocator and caches have not
  // yet been churned by the 256 MiB buffers of W0-W3.
  std::vector<Workload> all = {
      {"O1", "O1 record-per-op", [](const std::string&) { o1(); }},
      {"O2", "O2 hash-per-node", [](const std::string&) { o2(); }},
      {"O3", "O3 sync-overhead-hit", [](const std::string&) { o3(); }},
      {"F0", "F0 fma-peak f32", f0},
      {"W0", "W0 copy-ceiling 256MiB f32", w0},
      {"W1", "W1 pointwise-chain 16M f32", w1},
      {"W2", "W2 softmax 8192x4096 f32", w2},
      {"W3", "W3 layernorm 8192x4096 f32", w3},
      {"W4", "W4 mlp-train-step b256", w4},
      {"W5", "W5 control-step 64", w5},
      {"W6", "W6 matmul 4096 f32", w6},
      {"W7", "W7 gpt-train-step", w7},
      {"W7L", "W7L loss-after-20", w7_loss},
      {"W8", "W8 causal-attention-fwd-bwd", w8},
      {"W9", "W9 varlen-infer-32-calls", w9},
      {"W10", "W10 resnet18-train-step", w10},
      {"G1", "G1 linear-gelu 4096 f32", g1},
      {"L1", "L1 linear-relu batch1", l1},
      {"C1", "C1 first-step-cold-cache", [](const std::string& p) { c_rows(p, false); }},
      {"C2", "C2 first-step-warm-cache", [](const std::string& p) { c_rows(p, true); }},
  };
  std::set<std::string> wanted;
  for (const std::string& id : split_commas(only)) {
    bool known = std::any_of(all.begin(), all.end(), [&](const Workload& w) { return w.id == id; });
    if (!known) return usage_error("unknown workload id '" + id + "' in --only");
    wanted.insert(id);
  }

  // The backend and device must be able to run a graph at all; if not, one
  // row says so (a table script then shows why loom has no figures here).
  try {
    if (device == "cuda" || backend == "cuda") {
      g_dev = loom::Device(loom::kCUDA, 0);
      loom::ones({1}, loom::TensorOptions().device(g_dev)).item<float>();
    } else {
      loom::set_backend(backend);
    }
  } catch (const loom::Error& e) {
    row_error("*", peer, std::string("unavailable in this build: ") + e.what());
    if (!json.empty()) write_json(json);
    return 0;
  }

  for (const Workload& w : all) {
    if (wanted.empty() ? !w.run : !wanted.count(w.id)) continue;
    if (!w.run) {
      row_error(w.name, peer, "not implemented in loom-bench yet");
      continue;
    }
    try {
      w.run(peer);
    } catch (const loom::Error& e) {
      row_error(w.name, peer, e.what());
    }
  }
  if (print_metrics) std::printf("# loom::metrics() at exit\n%s", loom::metrics().to_string().c_str());
  if (!json.empty() && !write_json(json)) return usage_error("cannot write " + json);
  return 0;
}
