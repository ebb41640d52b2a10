// Planning a GEMM kernel: the problem read off the kernel's contraction, the
// candidate tile configurations, launch sizes, and the template instance.
#include "jit/cuda/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace loom::kernels::cuda::detail {
extern const char kGemmSource[];
extern const char kBf16Source[];
}

namespace loom::jit::cuda {

std::string GemmConfig::str() const {
  std::ostringstream o;
  o << bm << "x" << bn << "x" << bk;
  if (wgmma)
    o << " wgmma";
  else
    o << (mma ? " mma warps " : warp ? " ffma-warp " : " ffma ") << p << "x" << q;
  o << " stages " << stages;
  if (minb) o << " minb " << minb;
  if (split > 1) o << " split " << split;
  if (kg > 1) o << " kgroups " << kg;
  return o.str();
}

std::vector<uint64_t> GemmConfig::key() const {
  std::vector<uint64_t> k;
  for (int w : {bm, bn, bk, p, q, stages, int(mma), int(warp), minb, split, int(wgmma), kg}) k.push_back(static_cast<uint64_t>(w));
  return k;
}

std::vector<uint64_t> GemmProblem::key() const {
  return {static_cast<uint64_t>(dtype), tf32, static_cast<uint64_t>(batch), static_cast<uint64_t>(m),
          static_cast<uint64_t>(n), static_cast<uint64_t>(k), a_kmajor, a_vec, b_kmajor, b_vec, wgmma};
}

namespace {

// A buffer's base is 16-byte aligned: allocations are; arena temporaries
// start where the buffer plan put them.
bool base_aligned(const ir::KernelProgram& p, uint32_t b) {
  const ir::BufferInfo& info = p.buffers[b];
  return info.kind != ir::BufferKind::Temp || info.arena_offset % 32 == 0;
}

}  // namespace

namespace {
std::string element_at(int64_t off, uint32_t runtime) {
  std::string s = std::to_string(off) + "LL";
  if (runtime != ir::Access::kNoScalar) s += " + is[" + std::to_string(runtime) + "]";
  return s;
}
}  // namespace
std::string GemmProblem::a_at() const { return element_at(a_off, a_off_scalar); }
std::string GemmProblem::b_at() const { return element_at(b_off, b_off_scalar); }

GemmArgs gemm_args(const GemmProblem& g) { return {g.m, g.n, g.k, g.a_m, g.a_k, g.a_b, g.b_k, g.b_n, g.b_b}; }
bool gemm_takes_args(const GemmConfig& c, const GemmProblem& g) {
  return !c.mma && !c.wgmma && !is_reduced_floating_point(g.dtype);
}
static_assert(sizeof(GemmArgs) == 9 * 8, "GemmArgs is LoomGemmArgs: nine 64-bit words");

GemmProblem gemm_problem(const ir::KernelProgram& p, const ir::Kernel& k, bool tf32) {
  const ir::Contraction& c = *k.contraction;
  GemmProblem g;
  const int n = k.loop.n;  // 2, or 3 with a batch
  for (const ir::Expr& e : k.exprs)
    if (e.kind == ir::ExprKind::Contract) g.dtype = e.dtype;
  g.tf32 = tf32 && g.dtype == kFloat;
  g.batch = n == 3 ? k.loop[0] : 1;
  g.m = k.loop[n - 2], g.n = k.loop[n - 1], g.k = c.k;
  const ir::Access& a = k.accesses[c.a];
  const ir::Access& b = k.accesses[c.b];
  g.a_buffer = a.buffer, g.b_buffer = b.buffer;
  g.a_off = a.offset, g.a_m = a.strides[n - 2], g.a_k = c.a_k, g.a_b = n == 3 ? a.strides[0] : 0;
  g.b_off = b.offset, g.b_n = b.strides[n - 1], g.b_k = c.b_k, g.b_b = n == 3 ? b.strides[0] : 0;
  g.a_off_scalar = a.offset_scalar, g.b_off_scalar = b.offset_scalar;
  // The contiguous dim of each operand is contiguous in its tile (a dim of
  // extent 1 counts as contiguous); other strides copy element by element.
  const int64_t v = 16 / static_cast<int64_t>(element_size(g.dtype));
  auto vec = [&](bool contiguous, const ir::Access& x, int64_t other, int64_t batch_stride) {
    return contiguous && x.start_aligned(v) && other % v == 0 && batch_stride % v == 0 && base_aligned(p, x.buffer);
  };
  if (g.a_k == 1 || g.k == 1) {
    g.a_kmajor = false;
    g.a_vec = vec(true, a, g.a_m, g.a_b);
  } else if (g.a_m == 1 || g.m == 1) {
    g.a_kmajor = true;
    g.a_vec = vec(true, a, g.a_k, g.a_b);
  } else {
    g.a_kmajor = std::llabs(g.a_m) <= std::llabs(g.a_k);
  }
  if (g.b_n == 1 || g.n == 1) {
    g.b_kmajor = true;
    g.b_vec = vec(true, b, g.b_k, g.b_b);
  } else if (g.b_k == 1 || g.k == 1) {
    g.b_kmajor = false;
    g.b_vec = vec(true, b, g.b_n, g.b_b);
  } else {
    g.b_kmajor = std::llabs(g.b_n) <= std::llabs(g.b_k);
  }
  // Strides of a dim of extent 1 never matter; set them to 0 so that a
  // vector copy's address arithmetic stays inside the buffer.
  if (g.m == 1) g.a_m = 0;
  if (g.n == 1) g.b_n = 0;
  if (g.k == 1) g.a_k = g.b_k = 0;
  return g;
}

namespace {
// The LoomGemmWg configurations, first in a candidate list, for elements of
// `es` bytes (bm / 64 warpgroups, slices of 128 bytes of k): 128x256 for a
// product of at least a wave of 128x128 tiles, else 64x128; then 128x128.
std::vector<GemmConfig> wgmma_configs(int es, bool large) {
  std::vector<GemmConfig> cs = {{large ? 128 : 64, large ? 256 : 128, 128 / es, 0, 0, 4, true, false, 1, 1},
                                {128, 128, 128 / es, 0, 0, 4, true, false, 1, 1}};
  for (GemmConfig& c : cs) c.wgmma = true;
  return cs;
}
}  // namespace

std::vector<GemmConfig> gemm_candidates(const GemmProblem& g) {
  // At least a wave of 128x128 tiles (132 SMs on an H100).
  const bool large = ((g.m + 127) / 128) * ((g.n + 127) / 128) * g.batch >= 132;
  if (is_reduced_floating_point(g.dtype)) {
    // m16n8k16 tensor cores (LoomGemmBf16, p x q warps). Timed on an H100
    // (bench/micro/bf16_gemm.cu, 4096^3, cuBLAS 722 TFLOP/s): 128x256x64
    // 289 TFLOP/s, 128x128x64 two blocks per SM 289, 128x128x32 two per SM
    // 282, 128x256x32 244, 64x128x32 211, 64x64x32 160.
    auto mma = [](int bm, int bn, int bk, int p, int q, int stages, int minb = 0, int split = 1) {
      return GemmConfig{bm, bn, bk, p, q, stages, true, false, minb, split};
    };
    // On sm_90a, where both operands take 16-byte copies, the warpgroup
    // block first (LoomGemmWg; bench/micro/bf16_gemm.cu, same H100, cuBLAS
    // 710 TFLOP/s): 128x256 four stages 373 TFLOP/s, three 322, 128x128
    // 305-309, 64x128 244, 64x256 126; mma.sync's best there 293.
    // float16 takes the same mma.sync tiles (its .f16 form, same fragments
    // and float32 sums); the warpgroup block is bfloat16's only.
    const bool wg = g.dtype == kBFloat16 && g.wgmma && g.a_vec && g.b_vec;
    std::vector<GemmConfig> cs = wg ? wgmma_configs(2, large) : std::vector<GemmConfig>{};
    if (large) {
      for (const GemmConfig& c : {mma(128, 256, 64, 2, 4, 3), mma(128, 128, 64, 2, 4, 3, 2), mma(128, 128, 32, 2, 4, 3, 2)})
        cs.push_back(c);
      return cs;
    }
    cs.push_back(mma(64, 64, 32, 2, 2, 4));
    cs.push_back(mma(128, 128, 32, 2, 4, 3, 2));
    const int64_t tiles = ((g.m + 63) / 64) * ((g.n + 63) / 64) * g.batch;
    for (int s : {2, 4, 8, 16}) {
      if (g.k / s < 64 || tiles * (s / 2) >= 132) break;
      cs.push_back(mma(64, 64, 32, 2, 2, 4, 0, s));
    }
    return cs;
  }
  if (g.tf32) {
    // wgmma's TF32 form reads both operands K-major (x W^T: Linear's forward).
    std::vector<GemmConfig> cs = g.wgmma && g.a_vec && g.b_vec && !g.a_kmajor && !g.b_kmajor ? wgmma_configs(4, large)
                                                                                            : std::vector<GemmConfig>{};
    for (const GemmConfig& c : {GemmConfig{128, 128, 32, 2, 4, 3, true}, GemmConfig{64, 64, 32, 2, 2, 3, true},
                                GemmConfig{32, 32, 32, 1, 2, 3, true}})
      cs.push_back(c);
    return cs;
  }
  if (g.dtype == kDouble) return {{64, 64, 16, 4, 4, 3}, {64, 32, 16, 4, 4, 3}, {32, 32, 16, 4, 4, 3}};
  auto warp = [](int bm, int bn, int bk, int p, int q, int stages, int minb = 0, int split = 1) {
    return GemmConfig{bm, bn, bk, p, q, stages, false, true, minb, split};
  };
  // Large products (a wave of 128x128 blocks or more). Tuner timings of
  // W6 on an H100 with the planned copies (gemm_template.cu): warp-tiled
  // 128x256x32, 8x16 per thread, one block per SM 3.09 ms; 128x128x32 two
  // blocks per SM 3.14; 128x256x16 3.20; the plain FFMA loop 3.28; 128x64
  // for products just past the threshold (3.94). Four stages or 64-deep
  // slices were slower (3.15-7.95 ms).
  if (large)
    return {warp(128, 256, 32, 8, 16, 3), warp(128, 128, 32, 8, 8, 3, 2), warp(128, 256, 16, 8, 16, 3),
            {128, 128, 32, 8, 8, 3}, warp(128, 64, 32, 8, 8, 3, 2)};
  // Small ones (a batch-256 MLP layer) need small tiles to give 132 SMs a
  // block each, and with a long K split-K: (m/32)(n/32) blocks walking
  // K = 1024 alone are latency-bound. Timed on an H100 for W4's products
  // (LOOM_LOG=kernels) and slower everywhere: 8x8 thread tiles
  // (128x64, 64x128, 64x64; 2-4x), 64x64x16 with four stages (+5-10%).
  // Within the tuner's noise of 4x4: 4x8 and 8x4 (64x64, 128x64, 64x128),
  // minb 2, split 8; and in the graph the 8x4 weight gradients ran slower
  // (36 against 32 us: twice the epilogue elements per thread). The tuner
  // times a plain store, not the kernel's epilogue.
  std::vector<GemmConfig> cs = {warp(64, 64, 32, 4, 4, 3), warp(64, 32, 32, 4, 4, 3), warp(32, 32, 32, 4, 4, 3)};
  // K split inside the block (LoomGemm's KG): the warps a split across
  // blocks would bring, without its reduce kernel and workspace.
  auto grouped = [](GemmConfig c, int kg) {
    c.kg = kg;
    return c;
  };
  // Tuner timings on an H100 (W4's 256 x 1024 x 784 / 1024): 64x32 with
  // 8x4 thread tiles in 4 groups 19.7 / 21.2-21.9 us, 4x4 in 4 groups 21.0
  // / 22.3-23.2, no groups 22.1 / 26.4-27.0, split 4 (plus its reduce
  // kernel) 24.7 / 25.3-26.7. Each group has its own stages: 8 groups of
  // 64x32 would need 307 KB of shared memory.
  if (g.k >= 128)
    for (const GemmConfig& c : {grouped(warp(64, 32, 32, 8, 4, 3), 4), grouped(warp(64, 32, 32, 4, 4, 3), 4),
                                grouped(warp(64, 32, 32, 4, 4, 3), 2), grouped(warp(64, 64, 32, 4, 4, 3), 2),
                                grouped(warp(32, 32, 32, 4, 4, 3), 4)})
      if (gemm_shared_bytes(c, g) <= kGemmMaxSharedBytes) cs.push_back(c);
  for (const GemmConfig& c : {warp(64, 64, 32, 4, 4, 3), warp(32, 32, 32, 4, 4, 3)}) {
    const int64_t tiles = ((g.m + c.bm - 1) / c.bm) * ((g.n + c.bn - 1) / c.bn) * g.batch;
    for (int s : {2, 4, 8, 16}) {
      if (g.k / s < 64 || tiles * (s / 2) >= 132) break;
      GemmConfig x = c;
      x.split = s;
      cs.push_back(x);
    }
  }
  return cs;
}

GemmConfig gemm_heuristic(const GemmProblem& g, int multiprocessors) {
  const std::vector<GemmConfig> cs = gemm_candidates(g);
  for (const GemmConfig& c : cs)
    if (int64_t(gemm_grid(c, g)) * g.batch * c.split >= multiprocessors) return c;
  return cs.back();
}

std::string gemm_launch_bounds(const GemmConfig& c) {
  return "__launch_bounds__(" + std::to_string(gemm_threads(c)) + (c.minb > 0 ? ", " + std::to_string(c.minb) : "") + ")";
}

int gemm_threads(const GemmConfig& c) {
  if (c.wgmma) return 2 * c.bm;  // bm / 64 warpgroups
  return c.kg * (c.mma ? 32 * c.p * c.q : (c.bm / c.p) * (c.bn / c.q));
}

// Swizzled rows only for warp-tiled thread tiles of up to 32 elements
// (4x4, and 8x4 in K groups): there they save the element copies'
// instructions (W4's Linear products 3-10% faster on an H100, with 4x4
// tiles); for 8x8 and 8x16 tiles the 4 k of a fragment
// take the registers the double-buffered loop hides shared-memory latency
// with, and W6's 128x256 tile ran 3.21-3.55 ms as rows against 3.12.
bool gemm_row_tiles(const GemmConfig& c) { return c.warp && c.p * c.q <= 32; }

int64_t gemm_shared_bytes(const GemmConfig& c, const GemmProblem& g) {
  // LoomGemmWg::SMEM_BYTES: 128-byte rows, and 1 KB to align the base.
  if (c.wgmma) return int64_t(c.stages) * (c.bm + c.bn) * 128 + 1024;
  const int64_t v = 16 / static_cast<int64_t>(element_size(g.dtype));
  // As LoomGemm's A_ELEMS / B_ELEMS: the warp-tiled loop keeps an operand
  // contiguous along k as swizzled rows where gemm_row_tiles allows and
  // 16-byte copies are allowed.
  const bool rows = gemm_row_tiles(c);
  const bool a_rows = rows && !g.a_kmajor && g.a_vec, b_rows = rows && !g.b_kmajor && g.b_vec;
  const int64_t a = a_rows ? c.bm * c.bk : c.warp ? c.bk * (c.bm + 4) : g.a_kmajor ? c.bk * (c.bm + 8) : c.bm * (c.bk + v);
  const int64_t b = b_rows ? c.bn * c.bk : c.warp ? c.bk * (c.bn + 4) : g.b_kmajor ? c.bk * (c.bn + 8) : c.bn * (c.bk + v);
  return c.kg * c.stages * (a + b) * static_cast<int64_t>(element_size(g.dtype));  // each K group its own stages
}

uint32_t gemm_grid(const GemmConfig& c, const GemmProblem& g) {
  const int64_t tiles = ((g.m + c.bm - 1) / c.bm) * ((g.n + c.bn - 1) / c.bn);
  return static_cast<uint32_t>(std::max<int64_t>(tiles, 1));
}

int64_t gemm_split_chunk(const GemmConfig& c, const GemmProblem& g) {
  if (c.split <= 1) return 0;
  const int64_t per = (g.k + c.split - 1) / c.split;
  return std::max<int64_t>((per + c.bk - 1) / c.bk, 1) * c.bk;
}

int64_t gemm_accumulator_size(const GemmProblem& g) {
  return is_reduced_floating_point(g.dtype) ? 4 : static_cast<int64_t>(element_size(g.dtype));
}

int64_t gemm_workspace_elems(const GemmConfig& c, const GemmProblem& g) {
  return c.split > 1 ? int64_t(c.split) * g.batch * g.m * g.n : 0;
}

uint32_t gemm_reduce_grid(const GemmProblem& g, int multiprocessors) {
  const int64_t blocks = (g.batch * g.m * g.n + kGemmReduceThreads - 1) / kGemmReduceThreads;
  return static_cast<uint32_t>(std::clamp<int64_t>(blocks, 1, int64_t(multiprocessors) * 8));
}

std::string gemm_instance(const GemmConfig& c, const GemmProblem& g) {
  auto b = [](bool x) { return x ? "true" : "false"; };
  std::ostringstream o;
  if (c.wgmma) {
    o << "LoomGemmWg<" << (g.dtype == kBFloat16 ? "unsigned short" : "float") << ", " << c.bm << ", " << c.bn << ", "
      << c.stages << ", " << b(g.a_kmajor) << ", " << b(g.a_vec) << ", " << b(g.b_kmajor) << ", " << b(g.b_vec) << ">";
    return o.str();
  }
  if (is_reduced_floating_point(g.dtype)) {
    o << "LoomGemmBf16<" << c.bm << ", " << c.bn << ", " << c.bk << ", " << c.p << ", " << c.q << ", " << c.stages << ", "
      << b(g.a_kmajor) << ", " << b(g.a_vec) << ", " << b(g.b_kmajor) << ", " << b(g.b_vec) << ", " << b(g.dtype == kHalf) << ">";
    return o.str();
  }
  o << "LoomGemm<" << (g.dtype == kDouble ? "double" : "float") << ", " << c.bm << ", " << c.bn << ", " << c.bk << ", "
    << c.p << ", " << c.q << ", " << c.stages << ", " << b(g.a_kmajor) << ", " << b(g.a_vec) << ", " << b(g.b_kmajor)
    << ", " << b(g.b_vec) << ", " << b(c.mma) << ", " << b(c.warp) << ", " << b(gemm_row_tiles(c));
  if (c.kg > 1) o << ", " << c.kg;
  o << ">";
  return o.str();
}

const char* gemm_template_source() { return kernels::cuda::detail::kGemmSource; }

std::string gemm_tuning_source(const GemmProblem& g, const std::vector<GemmConfig>& candidates) {
  std::ostringstream o;
  o << kernels::cuda::detail::kBf16Source << gemm_template_source();
  // bfloat16, float16: operands and C of 16 bits, float32 sums (and workspace).
  const bool bf = is_reduced_floating_point(g.dtype);
  const char* t = g.dtype == kDouble ? "double" : "float";  // the accumulator
  const char* m = bf ? "unsigned short" : t;                // operands and C in memory
  const char* put = g.dtype == kBFloat16 ? "loom_bf16_narrow(v)" : g.dtype == kHalf ? "loom_f16_narrow(v)" : "v";
  for (size_t i = 0; i < candidates.size(); ++i) {
    const GemmConfig& c = candidates[i];
    // A split-K candidate's first kernel writes float partial sums to C = W.
    const char* c_type = c.split > 1 ? t : m;
    o << "extern \"C\" __global__ void " << gemm_launch_bounds(c) << " loom_tune" << i << "(const " << m << "* A, const "
      << m << "* B, " << c_type << "* C, LoomGemmArgs g) {\n  " << gemm_instance(c, g)
      << "::run(A, B, g, [&](long long b, long long m, long long n, " << t << " v) { C[((blockIdx.y * "
      << g.batch << "LL + b) * g.M + m) * g.N + n] = " << (c.split > 1 ? "v" : put) << "; }, " << gemm_split_chunk(c, g)
      << "LL);\n}\n";
    if (c.split > 1)
      o << "extern \"C\" __global__ void __launch_bounds__(" << kGemmReduceThreads << ") loom_tune" << i << "_r(const "
        << t << "* W, " << m << "* C, LoomGemmArgs g) {\n  LoomGemmReduce<" << t << ">::run(W, " << c.split << ", "
        << g.batch << "LL, g.M, g.N, [&](long long b, long long m, long long n, " << t
        << " v) { C[(b * g.M + m) * g.N + n] = " << put << "; });\n}\n";
  }
  // The operands' values: varied bits in [-1, 1), as a user's data. With
  // every element equal (a memset) the datapath barely toggles and draws
  // less power: W6's 128x256 tile timed 3.115 ms on such operands and ran
  // 3.13-3.15 in use; on these it times 3.155 and ran 3.147 (H100).
  o << "extern \"C\" __global__ void loom_tune_fill(" << m << "* p, long long n, unsigned seed) {\n"
    << "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n"
    << "    unsigned h = ((unsigned)i ^ seed) * 2654435761u;\n    h ^= h >> 15;\n    h *= 2246822519u;\n    h ^= h >> 13;\n"
    << "    const float v = (float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f;\n    p[i] = " << put << ";\n  }\n}\n";
  return o.str();
}

}  // namespace loom::jit::cuda
