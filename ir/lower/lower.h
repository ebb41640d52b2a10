// Lowering: ir::Graph -> ir::KernelProgram (ir/kernel.h).
//
// The passes run in the order of lowering_passes() below, the one list of
// them: Lowering::attempt (ir/lower/lower.cpp) runs it, LOOM_LOG=passes prints
// each pass by its name as it runs (and what it changed), and the table of
// docs/ARCHITECTURE.md section 3 is checked against it by a test.
// Around them, absorption trials (Lowering::run): a graph output that is
// one value per row of the one kernel reading it (a layer norm's mean the
// caller keeps) is computed and stored per row by that kernel; the passes
// run again with it absorbed, and the result is kept only if it has fewer
// kernels.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/kernel.h"

namespace loom::ir {

struct LowerLog {
  std::string passes;  // one line per pass: its name, what it changed
};

// A pass of the lowering, as the list names it: what LOOM_LOG=passes
// prints and the docs' table must follow.
struct PassInfo {
  const char* name;      // "vertical"
  const char* function;  // "Lowering::vertical": where to put a breakpoint
  const char* file;      // "ir/lower/fusion.cpp": where it is defined
  const char* purpose;   // one line
};
// The passes in the order they run.
const std::vector<PassInfo>& lowering_passes();

// What the backend's code generator can take.
struct LowerOptions {
  // Floating-point matrix products become GEMM kernels (Kernel::contraction)
  // with their pointwise consumers fused as the epilogue; otherwise each is
  // a LibraryCall over contiguous buffers.
  bool gemm_kernels = false;
  // A float product with a narrow output (at most kNarrowProductMaxN
  // columns) and a long K becomes a row kernel, one row of K per output
  // element, instead of a GEMM: a tile of the GEMM would be mostly empty
  // columns, and its K must be split over blocks (a second launch adds the
  // splits up). For the cuda backend (W4's logits, 256 x 10 x 1024).
  bool narrow_products_as_rows = false;
  // A float product with a short K (at most kShortProductMaxK) is an
  // expression, K multiply-adds per element, inlined into the kernel of
  // its consumer like any pointwise op, instead of a GEMM whose tiles would
  // mostly be K padding. For the cuda backend (W4's 256 x 1024 x 10
  // backward product, fused with its ReLU mask).
  bool short_products_inline = false;
  // Cheap pointwise producers of a GEMM's operand (relu(x) @ W, (x * s) @ W)
  // are applied as the GEMM reads the operand (ir::Contraction::a_value)
  // instead of being a pass of their own, for products of at least this
  // many multiply-adds (M * N * K); negative: never. Only where the
  // producers' input is a graph input or a library kernel's output: a value
  // a generated kernel computes takes them in that kernel's epilogue at no
  // cost (W4's ReLU after each Linear). llvm: every size (applied to packed
  // panels, measured free); cuda: large products only (applied to each
  // shared-memory slice before the block's barrier, which costs more than
  // the separate pass below ~2^34: measured on an H100 in 2026-11).
  double operand_producers_min_work = -1;
  // A reduction (up to four Reduce phases, then a Store: a sum, a var, a
  // softmax) with fewer rows than this, over rows of at least 2 *
  // kSplitMinPart elements, is split in two kernels per phase (pass
  // "split", ir/lower/split.cpp): partials over parts of each row, then their
  // fold; a store of every element becomes a pointwise kernel after them.
  // 0: never. llvm: enough rows for TBB's ranges on many cores; cuda:
  // enough groups of threads for every SM.
  int64_t split_reduction_rows = 0;
  // Pass "operand copies" (ir/lower/operand_copies.cpp): a float GEMM of at
  // least this many multiply-adds (M * N * K) whose raw operand is not
  // contiguous along K (B = [K, N] row-major) reads it from a copy that is,
  // made by a kernel of its own just before; negative: never. cuda with TF32
  // on sm_90a: the warpgroup tensor cores take TF32 operands only K-major.
  double k_contiguous_operands_min_work = -1;
  // The same for a B contiguous along K (x W^T) where the tiles want it
  // contiguous along N: cuda's exact float32 (FFMA) tiles.
  double n_contiguous_b_min_work = -1;
  // A runtime view offset (ir/node.h: a view of a stored tensor) that is a
  // multiple of this many bytes in the graph being compiled is taken to be
  // one in every run: the code may rely on it (cuda: 16-byte vector loads,
  // a GEMM's 16-byte copies), and KernelProgram::offset_guards lists what
  // each run's offsets must then satisfy; a run that does not runs a
  // variant compiled with 0 here (runtime/executor.cpp). 0: nothing is
  // assumed (llvm: its code needs no alignment).
  int64_t offset_alignment_bytes = 0;
};
inline constexpr int64_t kSplitMinPart = 1024;  // elements each partial reduces, at least
inline constexpr int64_t kNarrowProductMaxN = 16;
inline constexpr int64_t kNarrowProductMinK = 256;
inline constexpr int64_t kShortProductMaxK = 16;
// The most expressions one kernel's body holds: an inlined node past it
// gets a buffer of its own (its reason names the bound), and kernels are
// joined (vertical pass) or merged (horizontal) only within it. Compile time grows with
// the square of a body: on a 2-core EPYC, a chain of 1,000 adds compiled in
// 0.16-0.19 s as one kernel, 2,000 in 0.38-0.44 s, 8,000 in 5.7-6.1 s.
// A row kernel's body is what its phases emit (ir::emitted_exprs: each
// phase's loop evaluates what it needs again): past the bound, the phase
// crossing it reads its reduced value from a buffer.
inline constexpr size_t kMaxKernelExprs = 1024;
// The most memory accesses a joined or merged kernel holds. LLVM's
// instruction scheduler compares every pair of loads and stores it cannot
// prove apart (any two buffers may be one, for in-place updates): 600
// in-place updates x.mul_(2).add_(1) of [8] tensors, merged within
// kMaxKernelExprs only, compiled in 9.0 s; at most 256 accesses a kernel,
// 3.3 s; 128, 1.26 s; 64, 0.33 s; 32, 0.24 s (2-core EPYC).
inline constexpr size_t kMaxMergedAccesses = 64;

KernelProgram lower(const Graph& g, LowerLog* log = nullptr, const LowerOptions& options = {});

// Pass "split" (ir/lower/split.cpp), on a program whose loops are collapsed and
// whose buffers are not planned yet: returns how many kernels it split.
int split_reductions(KernelProgram& p, int64_t target_rows);

// Pass "operand copies" (ir/lower/operand_copies.cpp), after the split: returns
// how many operand copies it added.
int copy_operands(KernelProgram& p, const LowerOptions& options);

// A hash of every source file of the folders that decide what compiled code
// is (ir/, jit/, kernels/: LOOM_CODEGEN_DIRS in CMakeLists.txt), made at
// build time by cmake/codegen_id.cmake: the code generators' build ids, so
// the disk caches' keys change with any byte of them.
std::string codegen_source_id();

}  // namespace loom::ir
