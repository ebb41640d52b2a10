// GEMM kernels on the CPU: the loops around the generated tile function
// (jit/llvm/gemm.h), in the BLIS order. For each NC-wide column panel and
// KC-deep block of K, B's block is packed into NR-wide strips (kept in L3,
// a group of strips in L2 while it is used); for each MC-row block, A's
// block is packed into MR-row panels (twice L2: each panel is read once
// per strip group, from L2 or L3); then every MR x NR tile, panel
// by panel over each group of strips, calls the tile function, which adds
// the earlier K blocks' partial sums and, on the last block, runs the
// kernel's epilogue. Packing reads the operands through their strides (a
// transpose or a broadcast batch is never copied first).
//
// Small products skip packing (GemmPlan::direct): A is read in place and B
// too when its rows are contiguous; short or narrow ones with both
// operands contiguous along K run as dot products (GemmPlan::dot). Many
// small products in a batch run one per task; large ones split their MC
// blocks (and column groups, when M is short) over TBB's threads.
#pragma once
#include <cstdint>
#include <vector>

#include <loom/dtype.h>

#include "ir/kernel.h"
#include "jit/llvm/gemm.h"

namespace loom::runtime::cpu {

struct GemmPlan {
  ScalarType dtype = kFloat;
  jit::llvm_cpu::GemmShape shape{};
  int64_t batch = 1, m = 0, n = 0, k = 0;
  // Operands: buffer, offset, strides along batch, M (A) or N (B), K.
  uint32_t a_buf = 0, b_buf = 0;
  int64_t a_off = 0, a_sb = 0, a_sm = 0, a_sk = 0;
  int64_t b_off = 0, b_sb = 0, b_sn = 0, b_sk = 0;
  // The runtime scalar added to a_off (b_off): an operand that is a view of
  // a stored tensor at a runtime offset (ir::Access::offset_scalar).
  uint32_t a_off_scalar = ir::Access::kNoScalar, b_off_scalar = ir::Access::kNoScalar;
  int64_t a_at(const int64_t* is) const { return a_off + (a_off_scalar == ir::Access::kNoScalar ? 0 : is[a_off_scalar]); }
  int64_t b_at(const int64_t* is) const { return b_off + (b_off_scalar == ir::Access::kNoScalar ? 0 : is[b_off_scalar]); }
  // An output that may hold the partial sums of earlier K blocks (the
  // product stored as is, or the kernel's one output of the accumulation
  // dtype, rows contiguous, no two positions alike); -1: a scratch instead.
  int64_t out_buf = -1;
  int64_t out_off = 0, out_sb = 0, out_sm = 0;
  // Every buffer the kernel reads, with its size in bytes: partial sums go
  // to the output only if at run time it overlaps none of them (a donated
  // buffer is the same memory as an input).
  std::vector<std::pair<uint32_t, int64_t>> reads;
  int64_t out_bytes = 0;
  // Blocking (elements).
  int64_t kc = 0, mc = 0, nc = 0;
  // B strips an A panel meets in turn before the next panel (plan_gemm).
  int64_t strip_group = 1;
  bool direct = false;  // no packing of A (and of B when its rows are contiguous)
  bool dot = false;     // direct tiles as dot products (jit::llvm_cpu::gemm_dot_product; the kernel has no other path)
  // Operands with fused producers (ir::Contraction::a_value / b_value):
  // each packed panel (and, for a small product, A's copy and B's packed
  // strips) prepared by the kernel's function (kGemmPrepareA / B) before
  // any tile reads it.
  bool prepare_a = false, prepare_b = false;
};

// Decided once per kernel, at executable construction.
// `sizes`: the kernel's numbers that are arguments of its function.
GemmPlan plan_gemm(const ir::KernelProgram& p, const ir::Kernel& k, const ir::SizeArgs* sizes = nullptr);

// Runs the GEMM kernel; `error` is set if an epilogue saw bad data.
void run_gemm(const GemmPlan& plan, jit::llvm_cpu::GemmFn fn, void* const* bufs, const double* fs, const int64_t* is,
              jit::llvm_cpu::KernelError& error);

// Cache sizes in bytes (sysconf, else /sys/devices/system/cpu/cpu0/cache,
// else 32 KiB / 1 MiB / 8 MiB): where the block sizes come from.
struct CacheSizes {
  int64_t l1, l2, l3;
};
const CacheSizes& host_caches();

}  // namespace loom::runtime::cpu
