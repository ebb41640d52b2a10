// Times the GEMM candidates of a problem on the GPU and remembers the winner.
//
// The tuning kernels are the same template as the generated ones with a
// plain store as epilogue and the sizes as run-time arguments, one module
// per (problem layout, candidate list); their operands are scratch buffers
// of the problem's extents filled with a non-zero byte pattern (zeros can
// run faster than real data). Each candidate runs once to warm up, then is
// timed over a few launches with CUDA events; the fastest wins.
#include "runtime/cuda/gemm_tune.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include <loom/error.h>

#include "jit/cuda/codegen.h"
#include "runtime/buffer.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/library_module.h"
#include "runtime/disk_cache.h"
#include "runtime/executable_cache.h"
#include "runtime/log.h"

#ifndef LOOM_VERSION
#define LOOM_VERSION "dev"
#endif

namespace loom::runtime::cuda {

namespace jc = jit::cuda;

namespace {

std::atomic<bool> g_allow_tf32{false};

// Elements an operand spans from its offset (strides are never negative in
// a product's operands; a negative one makes the problem untunable).
int64_t extent(int64_t batch, int64_t rows, int64_t cols, int64_t sb, int64_t sr, int64_t sc) {
  if (sb < 0 || sr < 0 || sc < 0) return -1;
  return (batch - 1) * sb + (rows - 1) * sr + (cols - 1) * sc + 1;
}

// The tuning modules of problem g: one per candidate, so that NVRTC
// compiles them side by side on every core (all of a problem's candidates
// in one module took 1.5-2.5 s each for GPT-2's products on the H200
// machine's host, one product at a time per core).
std::vector<std::string> tuning_sources(const jc::GemmProblem& g, const std::vector<jc::GemmConfig>& cs) {
  std::vector<std::string> out;
  for (const jc::GemmConfig& c : cs) out.push_back(jc::gemm_tuning_source(g, {c}));
  return out;
}

jc::GemmConfig tune(const jc::GemmProblem& g, int device) {
  const DeviceContext& ctx = context(device);
  const DriverApi& d = driver();
  const std::vector<jc::GemmConfig> cs = jc::gemm_candidates(g);
  const size_t es = element_size(g.dtype);
  const int64_t a_n = extent(g.batch, g.m, g.k, g.a_b, g.a_m, g.a_k), b_n = extent(g.batch, g.k, g.n, g.b_b, g.b_k, g.b_n);
  const int64_t c_n = g.batch * g.m * g.n;
  if (a_n < 0 || b_n < 0 || c_n == 0 || (g.a_off + a_n + g.b_off + b_n + c_n) * int64_t(es) > (int64_t(2) << 30))
    return jc::gemm_heuristic(g, ctx.multiprocessors);
  const std::string what = "GEMM tuning kernels";
  // A module per candidate (tuning_sources), each loom_tune0 and its fill;
  // needed only here: unloaded once their launches ran.
  struct Unload {
    std::vector<CUmodule> m;
    CUstream stream;
    ~Unload() {
      driver().cuStreamSynchronize(stream);
      for (CUmodule x : m) driver().cuModuleUnload(x);
    }
  } unload{{}, ctx.stream};
  for (const std::string& source : tuning_sources(g, cs))
    unload.m.push_back(load_module(cached_cubin(source, device, source_words(source), what, "", 0), device, what));
  const CUmodule module = unload.m.at(0);
  const Device dev(kCUDA, static_cast<int8_t>(device));
  BufferPtr A = Buffer::allocate(dev, (g.a_off + a_n) * es), B = Buffer::allocate(dev, (g.b_off + b_n) * es);
  BufferPtr C = Buffer::allocate(dev, c_n * es);
  int64_t ws_n = 0;
  for (const jc::GemmConfig& c : cs) ws_n = std::max(ws_n, jc::gemm_workspace_elems(c, g));
  BufferPtr W = ws_n > 0 ? Buffer::allocate(dev, ws_n * jc::gemm_accumulator_size(g)) : nullptr;
  CUdeviceptr w = W ? reinterpret_cast<CUdeviceptr>(W->data()) : 0;
  CUfunction fill = nullptr;
  check(d.cuModuleGetFunction(&fill, module, "loom_tune_fill"), "cuModuleGetFunction", what);
  auto fill_operand = [&](const BufferPtr& buf, int64_t count, unsigned seed) {
    CUdeviceptr p = reinterpret_cast<CUdeviceptr>(buf->data());
    void* fparams[] = {&p, &count, &seed};
    check(d.cuLaunchKernel(fill, static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 4 * 1024)), 1, 1, 256, 1, 1,
                           0, ctx.stream, fparams, nullptr),
          "cuLaunchKernel", what + " (operand fill)");
  };
  fill_operand(A, g.a_off + a_n, 1);
  fill_operand(B, g.b_off + b_n, 2);
  CUdeviceptr a = reinterpret_cast<CUdeviceptr>(A->data()) + g.a_off * es, b = reinterpret_cast<CUdeviceptr>(B->data()) + g.b_off * es;
  CUdeviceptr c = reinterpret_cast<CUdeviceptr>(C->data());
  jc::GemmArgs args = jc::gemm_args(g);  // as the program's GEMM kernels take them
  CUevent e0 = nullptr, e1 = nullptr;
  check(d.cuEventCreate(&e0, 0), "cuEventCreate", what);
  check(d.cuEventCreate(&e1, 0), "cuEventCreate", what);
  float best_ms = std::numeric_limits<float>::max();
  jc::GemmConfig best;
  for (size_t i = 0; i < cs.size(); ++i) {
    CUfunction f = nullptr;
    check(d.cuModuleGetFunction(&f, unload.m[i], "loom_tune0"), "cuModuleGetFunction", what);
    const int64_t shared = jc::gemm_shared_bytes(cs[i], g);
    // Always (static shared memory counts against the 48 KB default too).
    if (d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared)))
      continue;  // more shared memory than this GPU gives a block
    const bool split = cs[i].split > 1;
    CUfunction r = nullptr;
    if (split) check(d.cuModuleGetFunction(&r, unload.m[i], "loom_tune0_r"), "cuModuleGetFunction", what);
    void* params[] = {&a, &b, split ? &w : &c, &args};
    void* rparams[] = {&w, &c, &args};
    auto launch = [&] {
      CUresult e = d.cuLaunchKernel(f, jc::gemm_grid(cs[i], g), std::max(cs[i].split, 1), static_cast<unsigned>(g.batch),
                                    jc::gemm_threads(cs[i]), 1, 1, static_cast<unsigned>(shared), ctx.stream, params, nullptr);
      if (e == CUDA_SUCCESS && split)
        e = d.cuLaunchKernel(r, jc::gemm_reduce_grid(g, ctx.multiprocessors), 1, 1, jc::kGemmReduceThreads, 1, 1, 0,
                             ctx.stream, rparams, nullptr);
      return e;
    };
    if (launch() != CUDA_SUCCESS) continue;
    constexpr int kRuns = 5;
    check(d.cuEventRecord(e0, ctx.stream), "cuEventRecord", what);
    for (int r = 0; r < kRuns; ++r) check(launch(), "cuLaunchKernel", what);
    check(d.cuEventRecord(e1, ctx.stream), "cuEventRecord", what);
    check(d.cuEventSynchronize(e1), "cuEventSynchronize", what);
    float ms = 0;
    check(d.cuEventElapsedTime(&ms, e0, e1), "cuEventElapsedTime", what);
    if (log_enabled(LogTopic::Kernels))
      log_line(LogTopic::Kernels, "gemm tune [%lld x] %lld x %lld x %lld %s: %.4f ms", (long long)g.batch, (long long)g.m,
               (long long)g.n, (long long)g.k, cs[i].str().c_str(), ms / kRuns);
    if (ms < best_ms) best_ms = ms, best = cs[i];
  }
  d.cuEventDestroy(e0);
  d.cuEventDestroy(e1);
  if (!best.valid()) throw Error("loom: no GEMM configuration could be launched on " + ctx.name);
  return best;
}

}  // namespace

bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

void set_allow_tf32(bool on) {
  if (g_allow_tf32.exchange(on) != on) executable_cache().clear();
}

namespace {
std::mutex g_chosen_mu;
std::map<std::vector<uint64_t>, jc::GemmConfig>& chosen_configs() {
  static auto* chosen = new std::map<std::vector<uint64_t>, jc::GemmConfig>;  // leaked: used until exit
  return *chosen;
}
bool tuning_off() {
  const char* e = std::getenv("LOOM_GEMM_TUNE");
  return e && std::strcmp(e, "0") == 0;
}
bool small(const jc::GemmProblem& g) {
  return static_cast<double>(g.batch) * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) <
         kTuneMinWork;
}
// The disk key of a problem's tuned configuration (`ns`: tune_ns).
DiskCache::Key tune_key(const std::string& ns, const std::vector<uint64_t>& words) {
  static const std::string version = std::string(LOOM_VERSION) + ", " + jc::build_id();
  return DiskCache::Key{ns, version, words};
}
std::string tune_ns(const DeviceContext& ctx) {
  return "cuda-gemm-tune-" + ctx.arch() + "-" + std::to_string(ctx.multiprocessors) + "sm";
}
}  // namespace

std::vector<std::string> pending_tuning_sources(const jc::GemmProblem& problem, int device) {
  const DeviceContext& ctx = context(device);
  jc::GemmProblem g = problem;
  g.wgmma = ctx.wgmma();
  if (tuning_off() || small(g) || std::getenv("LOOM_GEMM_CANDIDATE") || std::getenv("LOOM_GEMM_SPLIT")) return {};
  std::vector<uint64_t> key = g.key();
  key.push_back(static_cast<uint64_t>(device));
  {
    std::lock_guard lock(g_chosen_mu);
    if (chosen_configs().count(key)) return {};
  }
  const std::vector<uint64_t> disk_key = g.key();
  if (DiskCache::instance().load(tune_key(tune_ns(ctx), disk_key))) return {};
  return tuning_sources(g, jc::gemm_candidates(g));
}

bool gemm_config_fits(const jc::GemmConfig& c, const jc::GemmProblem& problem, int device) {
  const DeviceContext& ctx = context(device);
  jc::GemmProblem g = problem;
  g.wgmma = ctx.wgmma();
  if (c == jc::gemm_heuristic(g, ctx.multiprocessors)) return true;
  const std::vector<jc::GemmConfig> cs = jc::gemm_candidates(g);
  return std::find(cs.begin(), cs.end(), c) != cs.end();
}

jc::GemmConfig choose_gemm(const jc::GemmProblem& problem, int device) {
  const DeviceContext& ctx = context(device);
  jc::GemmProblem g = problem;
  g.wgmma = ctx.wgmma();  // the device's code is built for sm_90a
  if (tuning_off()) return jc::gemm_heuristic(g, ctx.multiprocessors);
  // Test hook: LOOM_GEMM_CANDIDATE=i takes candidate i of gemm_candidates
  // (the last where there are fewer), untuned, so a test can check each.
  if (const char* e = std::getenv("LOOM_GEMM_CANDIDATE"); e && *e) {
    const std::vector<jc::GemmConfig> cs = jc::gemm_candidates(g);
    return cs[std::min<size_t>(static_cast<size_t>(std::max(std::atoi(e), 0)), cs.size() - 1)];
  }
  // Test hook: LOOM_GEMM_SPLIT=n forces split-K with n splits on every
  // float32 FFMA product (the 32x32 warp-tiled tiles), untuned.
  if (const char* e = std::getenv("LOOM_GEMM_SPLIT"); e && std::atoi(e) > 1 && g.dtype == kFloat && !g.tf32)
    return jc::GemmConfig{32, 32, 32, 4, 4, 3, false, true, 0, std::atoi(e)};
  if (small(g)) return jc::gemm_heuristic(g, ctx.multiprocessors);
  std::vector<uint64_t> key = g.key();
  key.push_back(static_cast<uint64_t>(device));
  std::lock_guard lock(g_chosen_mu);
  auto* chosen = &chosen_configs();
  if (auto it = chosen->find(key); it != chosen->end()) return it->second;
  // On disk, per GPU model: the same architecture with another SM count
  // (an H100 PCIe against an SXM) may prefer other tiles.
  const std::string ns = tune_ns(ctx);
  const std::vector<uint64_t> disk_key = g.key();
  DiskCache::Key dk = tune_key(ns, disk_key);
  jc::GemmConfig c;
  if (auto hit = DiskCache::instance().load(dk); hit && hit->size() == sizeof(c)) {
    std::memcpy(&c, hit->data(), sizeof(c));
  } else {
    c = tune(g, device);
    DiskCache::instance().store(dk, std::span<const char>(reinterpret_cast<const char*>(&c), sizeof(c)));
  }
  chosen->emplace(std::move(key), c);
  return c;
}

}  // namespace loom::runtime::cuda
