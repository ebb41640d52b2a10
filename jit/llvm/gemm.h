// GEMM kernels (ir::Kernel::contraction): the generated half. One LLVM
// function per GEMM kernel computes one register tile of the product
// (MR x NR) from packed (or, for small products, unpacked) operands, then
// either keeps the partial sums (an earlier K block) or runs the kernel's
// epilogue on the tile (the last one). Blocking, packing and the parallel
// loops around it are the driver's: runtime/cpu/gemm_driver.h.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include <loom/dtype.h>

#include "ir/kernel.h"
#include "jit/llvm/codegen.h"

namespace llvm {
class Function;
class IRBuilderBase;
class Value;
}  // namespace llvm

namespace loom::jit::llvm_cpu {

// The register tile for a dtype on a target: MR rows by NR = 2 vectors of
// `lanes` columns. AVX-512 has 32 vector registers: 12 x 2 accumulators,
// two B vectors and the broadcast A element. AVX2 has 16: 6 x 2. The driver
// asks this for the same target the kernel was compiled for.
struct GemmShape {
  int mr, nr, lanes;
};
GemmShape gemm_shape(const Target& t, ScalarType dt);

// What the driver hands the generated tile function, one per call. Every
// field is 8 bytes: the generated code reads it as an array of i64/pointers.
struct GemmTile {
  const void* a;     // packed: the A panel (k-major, MR per k); direct: A at (batch, i, 0)
  const void* b;     // B at k = 0 of this tile's NR columns: a packed strip, or B itself
  int64_t kc;        // depth of this K block
  int64_t a_rs;      // direct: A's stride between rows (packed: unused)
  int64_t a_ks;      // direct: A's stride along K (packed: unused)
  int64_t b_ks;      // B's stride along K (a packed strip: NR); a dot kernel's: B's stride between columns
  int64_t batch, i, j;  // the tile's first element in the kernel's loops
  int64_t rows, cols;   // its valid part, at most MR x NR
  void* partial;     // partial sums of earlier K blocks: partial[r * ldp + c]
  int64_t ldp;
  int64_t flags;     // kGemm* below
};
inline constexpr int64_t kGemmDirect = 1;   // A unpacked (a_rs, a_ks); B loads masked to `cols`
inline constexpr int64_t kGemmAddPartial = 2;  // add `partial` to the sums first
inline constexpr int64_t kGemmLast = 4;     // the last K block: run the epilogue; else store to `partial`
inline constexpr int64_t kGemmShort = 8;    // direct, and the product has fewer than MR rows (M = 1: a vector)
// Not a tile: apply operand A's (B's) fused producers (ir::Contraction::
// a_value) in place to the `kc` elements at `a` (`b`), a packed panel
// (strip) the driver just filled. Padding rows (columns) are transformed
// too; their sums are never stored.
inline constexpr int64_t kGemmPrepareA = 16;
inline constexpr int64_t kGemmPrepareB = 32;
// Direct, one row (M = 1) and up to 2 NR columns, B read in place: a
// vector (a control loop's state, a batch-1 layer) times a matrix.
inline constexpr int64_t kGemmWide = 64;

using GemmFn = void (*)(const GemmTile* tile, void* const* buffers, const double* fscalars, const int64_t* iscalars,
                        KernelError* error);

// The epilogue at one position: the kernel's store phase with the product's
// value `product` (w lanes along N from column j). Emitted by KernelEmitter
// (kernel_emitter.cpp, emit_expr.cpp), which owns every expression.
using GemmEpilogue = std::function<void(llvm::Value* batch, llvm::Value* i, llvm::Value* j, llvm::Value* product, int w)>;
// Software prefetches of the memory the epilogue reads and writes in row i,
// columns [j, j + cols): emitted at a tile's start, so that those misses
// overlap the K loop instead of stalling the epilogue after it.
using GemmEpiloguePrefetch = std::function<void(llvm::Value* batch, llvm::Value* i, llvm::Value* j, int cols)>;
// An operand's fused producers on `w` lanes of its elements `x` (`which`:
// 0 for A, 1 for B); null for an operand without any.
using GemmOperandOp = std::function<llvm::Value*(int which, llvm::Value* x, int w)>;

// Emits the tile computation into `fn` at the builder's insert point (which
// must be in the entry block: accumulators are allocas there), reading
// `tile` (a GemmTile*); leaves the builder where every path has joined.
// `fused[w]`: whether operand w has fused producers (then `operand_op`
// computes them for kGemmPrepareA / B).
// `dot`: gemm_dot_product(kernel); then every tile computes its elements
// as dot products (`b` is B at the tile's first column and the block's
// first k, `b_ks` B's stride between columns) and only that path is
// emitted: the driver runs such a kernel direct (GemmPlan::dot; emitted
// into every GEMM kernel, the path cost a fifth more compile time).
void emit_gemm_tile(llvm::IRBuilderBase& b, llvm::Function* fn, llvm::Value* tile, ScalarType dt, const GemmShape& s,
                    const GemmEpilogue& epilogue, const GemmOperandOp& operand_op = {},
                    std::array<bool, 2> fused = {false, false}, bool dot = false,
                    const GemmEpiloguePrefetch& epilogue_prefetch = {});

// Whether GEMM kernel `k` runs as dot products: fewer rows than a tile
// (M < MR: x W^T at batch 1) or fewer columns (N < NR with K of two vectors
// or more: a classifier's logits), A and B both contiguous along K and B
// not along N, B without fused producers (A's are applied to a contiguous
// copy). Asked by the code generator and by the driver's plan, so both
// agree on every kernel.
bool gemm_dot_product(const ir::Kernel& k, const GemmShape& s, const ir::SizeArgs* sizes = nullptr);


}  // namespace loom::jit::llvm_cpu
