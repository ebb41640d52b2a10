// GEMM kernels (ir::Kernel::contraction) on a GPU: which instantiation of
// the tiled template (kernels/cuda/gemm_template.cu) computes a kernel's
// product, and how it is launched. The epilogue (the kernel's exprs and
// stores) is emitted by the expression emitter of codegen.cpp, per element of
// C; this file only plans the product. runtime/cuda/gemm_tune.cpp picks the
// configuration by timing gemm_candidates() on the GPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/kernel.h"

namespace loom::jit::cuda {

// One tile configuration. FFMA: a block of (bm/p)*(bn/q) threads, each a
// p x q tile of C; MMA (TF32 tensor cores): p x q warps. warp: the
// warp-tiled FFMA loop (both tiles k-major in shared memory, fragments
// double-buffered); minb: blocks per SM promised to ptxas through
// __launch_bounds__ (0: none); split > 1: split-K, grid.y = split partial
// products into a workspace, then a reduce kernel that applies the epilogue.
// wgmma (sm_90a, kernels/cuda/gemm_wgmma.cu: bfloat16, or TF32 with both
// operands contiguous along K): bm / 64 warpgroups, bk 128 bytes of k; p
// and q unused.
struct GemmConfig {
  int bm = 0, bn = 0, bk = 0, p = 0, q = 0, stages = 0;
  bool mma = false;
  bool warp = false;
  int minb = 0;
  int split = 1;
  bool wgmma = false;
  int kg = 1;  // K groups inside the block (warp-tiled FFMA): kg x the threads, each group a K range
  bool valid() const { return bm > 0; }
  std::string str() const;
  // Every field, for the keys of what is compiled from a configuration.
  std::vector<uint64_t> key() const;
  bool operator==(const GemmConfig&) const = default;
};

// What a kernel's product is, as the template and the tuner see it: sizes,
// strides (elements) and how each operand can be copied into shared memory.
struct GemmProblem {
  ScalarType dtype = kFloat;
  bool tf32 = false;  // float32 products may use TF32 tensor cores (user opt-in)
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t a_off = 0, a_m = 0, a_k = 0, a_b = 0;
  int64_t b_off = 0, b_k = 0, b_n = 0, b_b = 0;
  uint32_t a_buffer = 0, b_buffer = 0;
  // The runtime scalar added to a_off (b_off), or ir::Access::kNoScalar: a
  // view of a stored tensor at a run-time offset, copied 16 bytes at a time
  // only where the key promises the offset's alignment (ir/node.h).
  uint32_t a_off_scalar = ir::Access::kNoScalar, b_off_scalar = ir::Access::kNoScalar;
  // C++ for the element offset of A (B) in the generated source.
  std::string a_at() const;
  std::string b_at() const;
  bool a_kmajor = false, a_vec = false;  // A's tile stored [BK][BM] (A contiguous along m); 16-byte copies
  bool b_kmajor = false, b_vec = false;  // B's tile stored [BK][BN] (B contiguous along n)
  // The device runs code built for sm_90a (DeviceContext::arch): bfloat16
  // and TF32 products may use the warpgroup tensor cores. Set by the runtime.
  bool wgmma = false;
  // The tuning key: everything that changes which configuration is fastest.
  std::vector<uint64_t> key() const;
};
GemmProblem gemm_problem(const ir::KernelProgram& p, const ir::Kernel& k, bool tf32);

// The template's LoomGemmArgs on the host: sizes and element strides. An
// FFMA tile's kernel (gemm_takes_args) takes them as a launch parameter,
// not as constants in its text, and its operands' addresses too, not from
// the argument block as other kernels read buffers
// (runtime/cuda/cuda_executable.h); it reads the epilogue's addresses from
// the block after its main loop. ptxas then schedules the loop as the
// tuner, which launches that way, timed it. W6's 128x256 tile on an H200
// (NVRTC 13.0): sizes as constants, operands from the block 3.12-3.16 ms
// (233 registers); sizes as parameters 3.09 (247); operands too 3.04;
// epilogue addresses read late too 2.99, as tuned. A tensor-core tile
// keeps the constants: bfloat16 at W6's size 0.33 ms with them, 0.38-0.41
// with parameters.
struct GemmArgs {
  int64_t m, n, k, a_m, a_k, a_b, b_k, b_n, b_b;
};
GemmArgs gemm_args(const GemmProblem& g);
bool gemm_takes_args(const GemmConfig& c, const GemmProblem& g);

// The configurations worth timing for a problem, the first the best guess.
std::vector<GemmConfig> gemm_candidates(const GemmProblem& g);
// A configuration chosen without timing: enough blocks for `multiprocessors`.
GemmConfig gemm_heuristic(const GemmProblem& g, int multiprocessors);

int gemm_threads(const GemmConfig& c);
// The most dynamic shared memory a block may ask for on Hopper (227 KB);
// candidates that need more are not offered.
constexpr int64_t kGemmMaxSharedBytes = 227 * 1024;
std::string gemm_launch_bounds(const GemmConfig& c);  // "__launch_bounds__(threads[, minb])"
// Whether the warp-tiled loop may keep an operand contiguous along K as
// swizzled rows (the template's ROWS; gemm_shared_bytes sizes by it).
bool gemm_row_tiles(const GemmConfig& c);
int64_t gemm_shared_bytes(const GemmConfig& c, const GemmProblem& g);
uint32_t gemm_grid(const GemmConfig& c, const GemmProblem& g);  // grid.x; grid.y the split; grid.z the batch
// Split-K: the K range of one split (a multiple of bk), 0 without split;
// the workspace's elements (split * batch * m * n); the reduce launch.
int64_t gemm_split_chunk(const GemmConfig& c, const GemmProblem& g);
int64_t gemm_workspace_elems(const GemmConfig& c, const GemmProblem& g);
// Bytes of one sum (and workspace element): float32 for bfloat16 products.
int64_t gemm_accumulator_size(const GemmProblem& g);
constexpr int kGemmReduceThreads = 256;
uint32_t gemm_reduce_grid(const GemmProblem& g, int multiprocessors);

// The template instantiation "LoomGemm<float, 128, ...>".
std::string gemm_instance(const GemmConfig& c, const GemmProblem& g);
// The template's CUDA C (embedded from kernels/cuda/gemm_template.cu).
const char* gemm_template_source();

// A module of one kernel per candidate, loom_tune<i>(A, B, C, args) with C
// dense [batch, m, n], for the tuner to time; a split-K candidate's kernel
// writes its partial sums to W (loom_tune<i>(A, B, W, args)) and
// loom_tune<i>_r(W, C, args) adds them up into C. loom_tune_fill(p, n,
// seed) fills an operand with varied values in [-1, 1).
std::string gemm_tuning_source(const GemmProblem& g, const std::vector<GemmConfig>& candidates);

}  // namespace loom::jit::cuda
